"""The server's routes, module-level functions on APIRouters (OpenAI's API, tokenization, health and
debug), and the state they reach through ``app.state.serving``, never closures over the engine."""
