"""The queue's store: keys, partitions, wire format, vocabulary, the Lua moves and their caller, the connection.

All that opslib and applications may import of the core besides ``worker`` itself; it imports
nothing of the loop."""
