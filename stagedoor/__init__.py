"""Stagedoor's own job kinds, schedules and PostgreSQL schema."""
