"""Moves an analyst makes: replay, discard, the move they share, where ids are, delayed-job actions."""
