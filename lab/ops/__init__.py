"""Operations on a running cluster: jobs (submit, status, logs, delete), nodes and evictions."""
