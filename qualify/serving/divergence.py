"""Looking a greedy divergence up in the target alone: its log-probabilities of both tokens.

Where the speculative and the reference greedy outputs of a prompt first differ, the
reference server (the target without a speculator) is asked for one token after the prompt
and the common prefix, with the log-probabilities of both outputs' tokens there. The decision
(near-tie or not) is :func:`qualify.serving.specdecode.losslessness_evidence`'s; this module
only asks.

The prefix is sent as token ids, never text: text would be tokenized again, and a common
prefix whose last token is half of a word, or a chat prompt rendered by a template, need not
come back as the same tokens. The prompt's own ids are the ones the reference server returned
with its output (vLLM's ``return_token_ids``). The tokens are asked for by id
(``logprob_token_ids``, vLLM 0.32) and named by id in the answer (``return_tokens_as_token_ids``),
since two token ids can decode to the same text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qualify.errors import ServerUnavailable, ServingError
from qualify.serving.client import Completion, describe_request_error
from qualify.serving.specdecode import TokenLookup, first_divergence

#: Top log-probabilities asked for beside the tokens by id: vLLM's default ``--max-logprobs``. A server
#: that honours ``logprob_token_ids`` answers the named tokens whatever this is; one that does not answers
#: its top ones only, and a token outside them is reported unverified.
TOP_LOGPROBS = 20
_TOKEN_ID = re.compile(r"token_id:(-?\d+)")


@dataclass(frozen=True)
class GreedyRun:
    """One arm's greedy outputs, the prompts that failed, and (on the reference arm) each divergence looked up."""

    outputs: Mapping[str, Completion]
    failures: Sequence[str] = ()
    lookups: Mapping[str, TokenLookup] = field(default_factory=dict)
    # The server's /version, read while it serves (arms served one after another are stopped before the
    # level decides); None where not read.
    version: Mapping[str, Any] | None = None


def _token_id(key: str, where: str) -> int:
    m = _TOKEN_ID.fullmatch(key)
    if m is None:
        raise ServingError(f"{where}: the answer names token {key!r} as text, not as 'token_id:N' "
                           "(return_tokens_as_token_ids): two ids can decode to the same text, so it cannot be used")
    return int(m.group(1))


def token_logprobs(client: Any, model: str, prompt_ids: Sequence[int], tokens: Sequence[int], *,
                   timeout_s: float) -> tuple[dict[int, float], int | None]:
    """The target's log-probabilities of ``tokens`` after ``prompt_ids``, and the token it chooses there.

    Raises:
        ServingError: the request failed or the answer has no log-probabilities (ServerUnavailable: the
            server is gone).
    """
    from openai import OpenAIError

    try:
        response = client.completions.create(
            model=model, prompt=list(prompt_ids), max_tokens=1, temperature=0.0, logprobs=TOP_LOGPROBS,
            timeout=timeout_s,
            extra_body={"logprob_token_ids": sorted(set(tokens)), "return_tokens_as_token_ids": True})
    except (OpenAIError, ValueError) as exc:
        raise describe_request_error(exc, timeout_s) from None
    where = "the lookup's answer"
    try:
        choice = response.choices[0]
        lp = choice.logprobs
        top = lp.top_logprobs[0] if lp is not None and lp.top_logprobs else None
        if not top:
            raise ServingError(f"{where} carries no log-probabilities (the server ignored 'logprobs')")
        out = {_token_id(str(k), where): float(v) for k, v in top.items()}
        chosen = _token_id(str(lp.tokens[0]), where) if lp.tokens else None
        if chosen is not None and lp.token_logprobs and lp.token_logprobs[0] is not None:
            out.setdefault(chosen, float(lp.token_logprobs[0]))
        return out, chosen
    except (AttributeError, TypeError, ValueError, IndexError) as exc:
        raise ServingError(f"{where} is malformed ({type(exc).__name__}: {exc})") from None


def look_up_divergences(client: Any, model: str, speculative: Mapping[str, Completion],
                        reference: Mapping[str, Completion], *, timeout_s: float) -> dict[str, TokenLookup]:
    """Each prompt whose two outputs differ, looked up in the reference server (this client's), by prompt id.

    A lookup that cannot be made carries its reason in ``error``; once the server stops
    answering, the remaining prompts carry that reason without a request each.
    """
    out: dict[str, TokenLookup] = {}
    gone: str | None = None
    for pid, ref in reference.items():
        spec = speculative.get(pid)
        if spec is None or spec.token_ids is None or ref.token_ids is None:
            continue  # the decision reports the missing output itself
        at = first_divergence(spec.token_ids, ref.token_ids)
        if at is None:
            continue
        s_tok = spec.token_ids[at] if at < len(spec.token_ids) else None
        r_tok = ref.token_ids[at] if at < len(ref.token_ids) else None
        error = gone
        if error is None and (s_tok is None or r_tok is None):
            shorter = "speculative" if s_tok is None else "reference"
            error = (f"the {shorter} output ends at token {at} while the other goes on: there is no pair of tokens "
                     "to look up")
        elif error is None and ref.prompt_token_ids is None:
            error = ("the reference server returned no prompt token ids (vLLM's return_token_ids), so the prefix "
                     "cannot be sent as the tokens it generated after")
        elif (error is None and spec.prompt_token_ids is not None
              and spec.prompt_token_ids != ref.prompt_token_ids):
            error = (f"the two servers tokenized the prompt differently ({len(spec.prompt_token_ids)} and "
                     f"{len(ref.prompt_token_ids or ())} tokens): their outputs continue different inputs")
        if error is not None:
            out[pid] = TokenLookup(pid, at, s_tok, r_tok, error=error)
            continue
        assert s_tok is not None and r_tok is not None and ref.prompt_token_ids is not None
        try:
            logprobs, chosen = token_logprobs(client, model, (*ref.prompt_token_ids, *ref.token_ids[:at]),
                                              (r_tok, s_tok), timeout_s=timeout_s)
        except ServerUnavailable as exc:
            gone = f"the reference server stopped answering lookups: {exc}"
            out[pid] = TokenLookup(pid, at, s_tok, r_tok, error=gone)
            continue
        except ServingError as exc:
            out[pid] = TokenLookup(pid, at, s_tok, r_tok, error=str(exc))
            continue
        out[pid] = TokenLookup(pid, at, s_tok, r_tok, logprobs=logprobs, most_likely=chosen)
    return out


__all__ = ["TOP_LOGPROBS", "GreedyRun", "look_up_divergences", "token_logprobs"]
