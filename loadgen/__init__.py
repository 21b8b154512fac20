"""The load generator: workloads, the streaming client, and the drivers that run them.

Modules: ``clock`` (the run's time base), ``records`` (what is sent and recorded), ``sse`` (the
incremental event-stream parser), ``openai_stream`` (what an OpenAI-compatible stream means),
``apportion`` (tokens per chunk), ``connection_slots`` (the connection pool), ``client`` (one
streamed request), ``workload`` (length distributions, exact-length prompts), ``closed_loop``
(N users). It imports neither the engine nor bench; a tokenizer is anything that fits
``protocols.TokenizerLike``.
"""
