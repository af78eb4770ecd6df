"""Running a decision: the cascade of endpoint calls (_execute) and what it records (_steps:
Execution, Step, the call errors). Public names are exported from `serving`."""
