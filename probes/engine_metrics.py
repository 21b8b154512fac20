"""An engine's Prometheus /metrics, scraped at a fixed rate and stored under our names.

The adapter's map (engine_adapters.base.EngineAdapter.metric_names) gives, for each normalized
name, the engine's sample names newest first; the first one present in a scrape wins, so a
release that renamed a metric (vLLM's gpu_cache_usage_perc -> kv_cache_usage_perc) is read under
either name. A mapped histogram or summary family is stored as <ours>_sum, <ours>_count and
<ours>_bucket (label ``le``). Every stored sample keeps the engine's labels plus ``metric``, the
engine's own sample name, and ``endpoint``, the replica's URL, for one replica of a fleet
(several ``--url``), or ``scrape``, the label of a metrics endpoint apart from the load URL
(`bench run --metrics-url LABEL=URL`: a router's, a gateway's, a prefill or decode server's).
Text is parsed with prometheus_client's parser, never by hand.

Source "engine"; each sample's time is the midpoint of its scrape's request and response.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

from perfmodel.files import JSONObject
from probes.sampler import Emit, Sampler
from results.folder import sample_sources

_SERIES_SUFFIXES = ("_sum", "_count", "_bucket")
_SERIES_TYPES = ("histogram", "gaugehistogram", "summary")


def normalize(
    text: str, metric_names: Mapping[str, Sequence[str]]
) -> Iterator[tuple[str, float, dict[str, str]]]:
    """(our name, value, labels) for every sample of ``text`` that ``metric_names`` maps.

    ``metric_names``: our name -> the engine's names, newest first. A counter is named by its
    sample name (``vllm:prompt_tokens_total``); a histogram by its family name.
    """
    wanted: dict[str, tuple[str, int]] = {}  # engine name -> (ours, rank among candidates)
    for ours, candidates in metric_names.items():
        for rank, engine_name in enumerate(candidates):
            wanted.setdefault(engine_name, (ours, rank))
    found: dict[str, dict[int, list[tuple[str, float, dict[str, str]]]]] = {}
    for family in text_string_to_metric_families(text):
        series = family.type in _SERIES_TYPES and family.name in wanted
        for sample in family.samples:
            if series:
                ours, rank = wanted[family.name]
                suffix = sample.name[len(family.name) :]
                if suffix not in _SERIES_SUFFIXES:
                    continue  # _created and the like
                name = ours + suffix
            elif sample.name in wanted:
                ours, rank = wanted[sample.name]
                name = ours
            else:
                continue
            labels = {**sample.labels, "metric": sample.name}
            found.setdefault(ours, {}).setdefault(rank, []).append((name, sample.value, labels))
    for by_rank in found.values():
        yield from by_rank[min(by_rank)]


class EngineMetricsSampler(Sampler):
    """GET ``base_url``/metrics every ``interval_s`` (default 0.5 s: 2 Hz) and store the mapped
    samples (module docstring). ``headers`` go with every scrape (an endpoint behind a key);
    they are never stored or described. ``endpoint``: the replica's name, a label of every
    sample (a fleet's replica; None: the run's one engine, unlabelled). ``scrape``: the label of
    a ``--metrics-url``, on every sample (then ``base_url`` is that URL and ``path`` "")."""

    source = sample_sources.ENGINE

    def __init__(
        self,
        base_url: str,
        metric_names: Mapping[str, Sequence[str]],
        interval_s: float = 0.5,
        timeout_s: float = 2.0,
        path: str = "/metrics",
        headers: Mapping[str, str] | None = None,
        endpoint: str | None = None,
        scrape: str | None = None,
    ) -> None:
        super().__init__(interval_s)
        self.endpoint = endpoint
        self._extra_labels = {
            **({"endpoint": endpoint} if endpoint else {}),
            **({"scrape": scrape} if scrape else {}),
        }
        self._headers = dict(headers or {})
        self.url = base_url.rstrip("/") + path
        self.metric_names = {k: tuple(v) for k, v in metric_names.items()}
        self._timeout_s = timeout_s
        self._client: httpx.Client | None = None
        self.scrape_bytes = 0
        self.names_seen: set[str] = set()

    def open(self) -> str | None:
        if not self.metric_names:
            return "the engine adapter maps no Prometheus names; engine metrics not recorded"
        self._client = httpx.Client(timeout=self._timeout_s, headers=self._headers)
        try:
            response = self._client.get(self.url)
        except httpx.HTTPError as exc:
            self.close()
            return f"GET {self.url} failed ({type(exc).__name__}: {exc}); no engine metrics"
        if response.status_code != 200:
            self.close()
            return f"GET {self.url} answered HTTP {response.status_code}; no engine metrics"
        return None

    def sample(self, t_ns: int, emit: Emit) -> None:
        assert self._client is not None
        response = self._client.get(self.url)
        response.raise_for_status()
        # httpx's elapsed spans request to response; place the readings at its midpoint.
        t_mid_ns = t_ns + int(response.elapsed.total_seconds() * 1e9 / 2)
        self.scrape_bytes += len(response.content)
        for name, value, labels in normalize(response.text, self.metric_names):
            self.names_seen.add(name)
            emit(name, value, {**labels, **self._extra_labels}, t_ns=t_mid_ns)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def describe(self) -> JSONObject:
        stored = {n.removesuffix(s) for n in self.names_seen for s in ("", *_SERIES_SUFFIXES)}
        return {
            "url": self.url,
            **self._extra_labels,
            "scrape_bytes": self.scrape_bytes,
            "mapped_but_absent": sorted(set(self.metric_names) - stored),
        }
