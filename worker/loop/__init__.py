"""The read loop: the runner, its slots, the rotation over partitions, outcomes, upkeep chores, the scheduler chore."""
