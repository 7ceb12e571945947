"""The eviction drill: evict a node from a running elastic job and measure that training
goes on (seconds to recover, steps lost, seconds for a new node to join)."""
