"""`elastic-lab submit`: render charts/elastic-pytorchjob for a stack and apply it."""
