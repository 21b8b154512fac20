"""The load generator: workloads, the streaming client, and the drivers that run them.

Modules: ``clock`` (the run's time base), ``sse`` (the incremental event-stream parser),
``openai_stream`` (what an OpenAI-compatible stream means), ``apportion`` (tokens per chunk),
``raw_http`` (the lean HTTP/1.1 path) and ``connection_slots`` (httpx's), ``client`` (one
streamed request), ``workload_spec`` (what a workload is made of: its kind, length
distributions, shared prefixes; the types scenarios use), ``workload`` (exact-length prompts),
``sharegpt``, ``multiturn`` and ``trace`` (file-based and conversational workloads), ``arrivals``
(open-loop schedules), ``closed_loop`` (N users, sessions) and ``open_loop`` (planned times,
concurrency cap), ``selfcheck`` (the client's own lags and CPU), ``driver`` (a load plan run in
this process), ``workers`` (the plan sharded over processes), ``locust_job``/``locust_driver``/
``locustfile`` (Locust).

What it sends and records is the results contract's (results.records, results.client_samples).
It imports neither the engine nor bench; a tokenizer is anything that fits
``protocols.TokenizerLike``.
"""
