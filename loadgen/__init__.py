"""The load generator: workloads, the streaming client, and the drivers that run them.

Rooms, each importing only those below it (pyproject.toml's import-linter contracts):

- ``drivers``: a load plan run in this process (``driver``), closed loop (N users, sessions) and
  open loop (planned times, concurrency cap), the plan sharded over worker processes
  (``workers``), Locust in ``locust/`` (``driver`` starts ``master`` and ``worker`` processes,
  which exchange ``job``'s messages; ``fleet`` is the master's book of workers), the workers'
  measured clock offsets (``clock_sync``), the client's self-check of its own lags and CPU
  (``selfcheck``).
- ``client``: one streamed request (``stream``), the lean HTTP/1.1 path (``raw_http``) and
  httpx's (``connection_slots``), the incremental event-stream parser (``sse``), what an
  OpenAI-compatible stream means (``openai_stream``), tokens per chunk (``apportion``).
- ``workloads``: what a workload is made of, the types scenarios use (``spec``: kinds, length
  distributions, shared prefixes), exact-length prompts (``prompts``), ShareGPT, multi-turn
  and trace files, open-loop arrival schedules (``arrivals``).
- ``clock`` (the run's time base), ``protocols`` (what a tokenizer must offer) and
  ``request_spec`` (``RequestSpec``: one request to send), over ``api_kinds`` (each API the
  load generator speaks, declared once).

What it records is the results contract's (results.folder.records, results.folder.client_samples).
It imports neither the engine nor bench; a tokenizer is anything that fits
``protocols.TokenizerLike``.
"""
