"""qualify.serving.divergence: a divergence is looked up in the reference server after exactly the prompt's and the
common prefix's token ids, both tokens asked for by id; a lookup that cannot be made says why (against the
fault-injecting server, tests/fault_server.py)."""

from __future__ import annotations

from typing import Any

import pytest

from qualify.errors import ServingError
from qualify.serving import client as serving
from qualify.serving import divergence as dv
from tests.fault_server import MODEL, PROMPT_TOKENS, fault_server

PROMPT = tuple(range(1, PROMPT_TOKENS + 1))


def _out(pid: str, ids: tuple[int, ...], prompt_ids: tuple[int, ...] | None = PROMPT) -> serving.Completion:
    return serving.Completion(pid, "", ids, len(ids), "length", 0.0, prompt_token_ids=prompt_ids)


def test_token_logprobs_sends_token_ids_and_reads_them_back_by_id() -> None:
    with fault_server(lookup_logprobs={103: -0.2, 999: -1.7}) as server:
        client = serving.make_client(server.endpoint, timeout_s=10)
        logprobs, chosen = dv.token_logprobs(client, MODEL, (*PROMPT, 100, 101, 102), (103, 999), timeout_s=10)
        body = server.lookups[0]
    assert chosen == 103 and logprobs == {103: -0.2, 999: -1.7}
    assert body["prompt"] == [*PROMPT, 100, 101, 102] and body["max_tokens"] == 1
    assert body["logprob_token_ids"] == [103, 999] and body["return_tokens_as_token_ids"] is True
    assert body["logprobs"] == dv.TOP_LOGPROBS


def test_a_token_named_as_text_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Completions:
        def create(self, **kw: Any) -> Any:
            lp = type("LP", (), {"top_logprobs": [{"\ufffd": -0.1}], "tokens": ["\ufffd"], "token_logprobs": [-0.1]})
            return type("R", (), {"choices": [type("C", (), {"logprobs": lp})]})

    client = type("Client", (), {"completions": Completions()})()
    with pytest.raises(ServingError, match="names token '\ufffd' as text, not as 'token_id:N'"):
        dv.token_logprobs(client, MODEL, PROMPT, (5,), timeout_s=1)


def test_look_up_divergences_looks_up_only_divergent_prompts_after_their_common_prefix() -> None:
    spec = {"same": _out("same", (100, 101)), "diff": _out("diff", (100, 101, 999, 103))}
    ref = {"same": _out("same", (100, 101)), "diff": _out("diff", (100, 101, 102, 103))}
    with fault_server(lookup_logprobs={102: -0.3, 999: -0.4}) as server:
        lookups = dv.look_up_divergences(serving.make_client(server.endpoint, timeout_s=10), MODEL, spec, ref,
                                         timeout_s=10)
        sent = [b["prompt"] for b in server.lookups]
    assert list(lookups) == ["diff"] and sent == [[*PROMPT, 100, 101]]
    lk = lookups["diff"]
    assert (lk.position, lk.speculative_token, lk.reference_token) == (2, 999, 102)
    assert lk.logprobs == {102: -0.3, 999: -0.4} and lk.most_likely == 102 and lk.error is None


def test_a_lookup_that_cannot_be_made_says_why_without_a_request() -> None:
    spec = {"short": _out("short", (100,)), "tok": _out("tok", (100, 5), prompt_ids=(1, 2)),
            "noids": _out("noids", (100, 5))}
    ref = {"short": _out("short", (100, 101)), "tok": _out("tok", (100, 101)),
           "noids": _out("noids", (100, 101), prompt_ids=None)}
    lookups = dv.look_up_divergences(object(), MODEL, spec, ref, timeout_s=1)  # a request would fail: no client
    assert lookups["short"].error == ("the speculative output ends at token 1 while the other goes on: there is no "
                                      "pair of tokens to look up")
    assert lookups["tok"].error == ("the two servers tokenized the prompt differently (2 and 7 tokens): their "
                                    "outputs continue different inputs")
    assert lookups["noids"].error is not None and "returned no prompt token ids" in lookups["noids"].error


def test_a_server_that_stops_answering_ends_the_lookups_with_its_reason() -> None:
    spec = {p: _out(p, (100, 999)) for p in ("a", "b")}
    ref = {p: _out(p, (100, 101)) for p in ("a", "b")}
    with fault_server(fault="die", fault_after=0) as server:
        lookups = dv.look_up_divergences(serving.make_client(server.endpoint, timeout_s=5), MODEL, spec, ref,
                                         timeout_s=5)
        asked = server.generations
    assert asked == 1  # the second prompt was not sent to a server that is gone
    assert all((lk.error or "").startswith("the reference server stopped answering lookups") for lk in lookups.values())


def test_an_answer_without_logprobs_is_an_error() -> None:
    with fault_server() as server:  # lists no log-probability at all
        client = serving.make_client(server.endpoint, timeout_s=10)
        with pytest.raises(ServingError, match="carries no log-probabilities"):
            dv.token_logprobs(client, MODEL, PROMPT, (100,), timeout_s=10)
