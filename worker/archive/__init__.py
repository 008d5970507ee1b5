"""The dead-letter archive: its PostgreSQL table, the rows, the dead log and the archiver."""
