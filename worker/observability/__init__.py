"""What a worker tells about itself and the queue: metrics, the queue-state reader, waiting, logs."""
