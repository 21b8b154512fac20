"""One streamed request to an OpenAI-compatible endpoint, and how its stream is read."""
