"""What the HTTP front checks before a request reaches the engine: keys, body size, connection
limits, client disconnects."""
