"""llama.cpp's sampler chain, as a turn draws with it (`Sampler`), as the distribution it draws
from (`ChainDistribution`) and stage by stage (`StagedSampler`); a constrained reply's GBNF
comes from chatapp.engine.local.llama.schema_gbnf."""

from __future__ import annotations

import ctypes
import time
from typing import Protocol

import llama_cpp
import numpy as np

from chatapp.errors import InputError, ModelError


class _Context(Protocol):
    """What the distribution reads of a runtime (LlamaRuntime): its context and vocabulary size."""

    @property
    def ctx(self): ...

    @property
    def n_vocab(self) -> int: ...


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)
assert _TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


GRAMMAR_CHUNKS = (64, 1024)
"""The best entries by logit a grammar is tried on before the whole vocabulary (Sampler)."""


class Sampler:
    """The turn's llama.cpp sampler chain. `sample` is llama_sampler_sample; `draw` applies the
    same chain to candidates the caller gives and says what it drew from (see local.probing)."""

    def __init__(self, ctx, *, temperature: float, top_k: int, top_p: float, min_p: float, seed: int,
                 n_vocab: int = 0, grammar: tuple[object, str] | None = None, count_mask: bool = False):
        """`grammar`: (the vocabulary, GBNF text with a `root` rule) the reply must follow;
        `count_mask`: mask the whole vocabulary on every token, to count what the grammar allows."""
        self._ctx = ctx
        self.greedy = temperature <= 0
        """The chain is llama.cpp's greedy sampler (after the grammar, if any): the first largest
        logit, no state."""
        self._argmax = self.greedy and grammar is None and n_vocab > 0  # a row's view needs n_vocab
        self.top_k = top_k
        self.n_vocab = n_vocab
        self._data = np.zeros(0, dtype=_TOKEN_DATA)
        self._pointer = self._array = None
        self._rows: dict[int, np.ndarray] = {}
        params = llama_cpp.llama_sampler_chain_default_params()
        params.no_perf = True
        self._chain = llama_cpp.llama_sampler_chain_init(params)
        add = lambda s: llama_cpp.llama_sampler_chain_add(self._chain, s)  # noqa: E731
        self._grammar = None
        self.count_mask = count_mask
        self.grammar_steps: list[tuple[int | None, float | None, float]] = []
        """Per token sampled under the grammar: the vocabulary entries it allowed and the share of
        the model's probability (softmax of the raw logits) it cut (None unless `count_mask`),
        and the seconds the step took (checks, mask, chain and the grammar's accept)."""
        if grammar is not None:
            self._vocab_ids = np.arange(n_vocab, dtype=np.int32)
            self._one = np.zeros(1, dtype=_TOKEN_DATA)
            # Apart from the chain, so that its time and its mask are its own (`_sample_constrained`).
            self._grammar = llama_cpp.llama_sampler_init_grammar(grammar[0], grammar[1].encode("utf-8"), b"root")
            if not self._grammar:
                raise InputError("llama.cpp cannot parse the reply's grammar (GBNF with a root rule)")
        if temperature <= 0:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            add(llama_cpp.llama_sampler_init_top_k(top_k))
            add(llama_cpp.llama_sampler_init_top_p(top_p, 1))
            add(llama_cpp.llama_sampler_init_min_p(min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(temperature))
            add(llama_cpp.llama_sampler_init_dist(llama_cpp.LLAMA_DEFAULT_SEED if seed < 0 else seed))

    @property
    def constrained(self) -> bool:
        """A grammar comes first in the chain."""
        return self._grammar is not None

    def sample(self, row: int = -1) -> int:
        if self._argmax:
            # What the greedy chain picks (np.argmax also takes the first largest), read in place:
            # llama_sampler_sample first copies all 49k logits of the default model into a
            # candidate array, 70 µs a row here against 15-20 µs, on every decode step and on
            # every row of a verify batch.
            return int(np.argmax(self.logits(row)))
        if self._grammar is not None:
            return self._sample_constrained(row)
        return llama_cpp.llama_sampler_sample(self._chain, self._ctx, row)

    def _sample_constrained(self, row: int) -> int:
        """The token under the grammar, as if the grammar came first in the chain, with the time
        the step took and, with `count_mask`, the grammar's mask over the whole vocabulary: the
        entries it left finite and the probability of the rest.

        Masking all 49k entries takes milliseconds a token here, so without `count_mask` as few
        are masked as give the same token: greedy, the best token alone when the grammar allows
        it (as llama.cpp's common sampler checks the drawn token first); else the best entries
        by logit, in growing chunks, until the chain's top_k of them are allowed (greedy: one).
        The chain's first sampler keeps only the top_k, and every entry outside the chunk has a
        lower logit than all inside it, so the chain draws from what the whole mask leaves it."""
        logits = self.logits(row)
        began = time.perf_counter()
        allowed = cut = token = None
        if self.count_mask:
            token, allowed, cut = self._masked_whole(logits, count=True)
        else:
            if self.greedy:
                best = int(np.argmax(logits))
                token = best if self._grammar_allows(best, float(logits[best])) else None
            if token is None:
                token = self._masked_best(logits)
        llama_cpp.llama_sampler_accept(self._grammar, token)
        self.grammar_steps.append((allowed, cut, time.perf_counter() - began))
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token

    def _masked_best(self, logits: np.ndarray) -> int:
        """The chain's pick among the best entries the grammar allows (see _sample_constrained)."""
        need = 1 if self.greedy else self.top_k
        for size in GRAMMAR_CHUNKS if need > 0 else ():
            if size >= self.n_vocab:
                break
            ids = np.argpartition(logits, -size)[-size:]
            ids = ids[np.lexsort((ids, -logits[ids]))]  # falling logits, ties by id as the whole array has them
            data, array = self._candidates(size)
            data["id"], data["logit"], data["p"] = ids, logits[ids], 0.0
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
            kept = np.isfinite(data["logit"])
            n = int(np.count_nonzero(kept))
            if n >= need:
                data[:n] = data[kept]
                array.size = n
                return self._selected(array)
        return self._masked_whole(logits)[0]

    def _masked_whole(self, logits: np.ndarray, count: bool = False) -> tuple[int, int | None, float | None]:
        """The grammar over every entry, then the chain: the token, and with `count` the entries
        allowed and the share of the model's probability (softmax of the raw logits) cut."""
        data, array = self._candidates(self.n_vocab)
        data["id"], data["logit"], data["p"] = self._vocab_ids, logits, 0.0
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        allowed = cut = None
        if count:
            kept = np.isfinite(data["logit"])
            weights = np.exp(logits - logits.max())
            allowed, cut = int(np.count_nonzero(kept)), max(0.0, 1.0 - float(weights[kept].sum() / weights.sum()))
        return self._selected(array), allowed, cut

    def _selected(self, array) -> int:
        """Apply the chain to `array`; the id it selected (read where the samplers left the data)."""
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise ModelError("llama.cpp's sampler chain selected no token")
        return int(np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)["id"][array.selected])

    def _grammar_allows(self, token: int, logit: float) -> bool:
        """The grammar's verdict on one candidate (its apply on an array of that one token)."""
        one = self._one
        one["id"], one["logit"], one["p"] = token, logit, 0.0
        array = llama_cpp.llama_token_data_array(data=one.ctypes.data_as(llama_cpp.llama_token_data_p), size=1,
                                                 selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        return bool(np.isfinite(one["logit"][0]))

    def _candidates(self, n: int):
        """A reused candidate array of n entries, reset for a fresh apply."""
        if len(self._data) < n:  # one array struct per buffer: building them costs more than the chain
            self._data = np.zeros(n, dtype=_TOKEN_DATA)
            self._pointer = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)
            self._array = llama_cpp.llama_token_data_array(data=self._pointer, size=n, selected=-1, sorted=False)
        array = self._array
        array.data, array.size, array.selected, array.sorted = self._pointer, n, -1, False
        return self._data[:n], array

    def logits(self, row: int = -1) -> np.ndarray:
        """Logits row `row` of the last decode, in place (valid until the next decode)."""
        address = ctypes.cast(llama_cpp.llama_get_logits_ith(self._ctx, row), ctypes.c_void_p).value
        if not address:
            raise ModelError(f"llama.cpp has no logits at row {row}")
        view = self._rows.get(address)
        if view is None:  # a row's place in llama.cpp's buffer repeats: one numpy view each
            view = self._rows[address] = np.frombuffer((ctypes.c_float * self.n_vocab).from_address(address),
                                                       dtype=np.float32)
        return view

    def draw(self, ids: np.ndarray, logits: np.ndarray) -> tuple[int, np.ndarray]:
        """What `sample` does, on these candidates instead of the whole vocabulary: the chain is
        applied to them, the selected one drawn and accepted. Returns it, with the candidates the
        chain kept (a copy; fields "id" and "p"): the distribution it drew from, except when
        greedy, where it is a point mass on the draw whatever "p" says. Equal to `sample` when the
        candidates include the top_k (the chain's first sampler keeps only those), or are every
        token. One copy and no conversion: this runs once per reply token, on caches the decode
        just filled, where each numpy call costs three times what it costs in a loop."""
        n = len(ids)
        data, array = self._candidates(n)
        data["id"], data["logit"], data["p"] = ids, logits, 0.0
        if self._grammar is not None:
            llama_cpp.llama_sampler_apply(self._grammar, ctypes.byref(array))
        llama_cpp.llama_sampler_apply(self._chain, ctypes.byref(array))
        if not 0 <= array.selected < array.size:
            raise ModelError("llama.cpp's sampler chain selected no token")
        if ctypes.cast(array.data, ctypes.c_void_p).value == self._data.ctypes.data:
            kept = self._data[:array.size]
        else:  # samplers may point `data` elsewhere (the binding's header says so): read where it points
            kept = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
        token = int(kept["id"][array.selected])
        if self._grammar is not None:
            llama_cpp.llama_sampler_accept(self._grammar, token)
        llama_cpp.llama_sampler_accept(self._chain, token)
        return token, kept.copy()

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if getattr(self, "_grammar", None) is not None:
            llama_cpp.llama_sampler_free(self._grammar)
            self._grammar = None

    def __del__(self):
        self.close()



class ChainDistribution:
    """The distribution `Sampler.sample` draws from at one logits row, as (ids, probs) arrays.

    llama_sampler_sample builds a llama_token_data_array of every token's logit, applies the
    chain, and takes the selected entry. This applies the same chain (top_k, top_p, min_p,
    temp; greedy at temperature 0) to the same array, ending in a `dist` sampler of its own:
    dist's apply computes each survivor's probability (softmax of the tempered logits) and
    writes it into the array before drawing, and its draw is ignored here, so the turn's own
    sampler and its random state are untouched. At temperature 0 the greedy sampler picks the
    first largest logit and the distribution is a point mass on it.
    """

    def __init__(self, runtime: _Context, *, temperature: float, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05):
        self._ctx = runtime.ctx
        self._n_vocab = runtime.n_vocab
        self._greedy = temperature <= 0
        # The same chain as Sampler's, with a fixed seed: only dist's probabilities are used.
        self._chain = Sampler(self._ctx, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=0)
        self._data = np.zeros(self._n_vocab, dtype=_TOKEN_DATA)
        self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)
        self._array = llama_cpp.llama_token_data_array(
            data=self._data.ctypes.data_as(llama_cpp.llama_token_data_p), size=self._n_vocab, selected=-1,
            sorted=False)

    def at(self, row: int = -1) -> tuple[np.ndarray, np.ndarray]:
        """Candidate ids and their probabilities (summing to 1) at logits row `row` of the last decode."""
        logits = llama_cpp.llama_get_logits_ith(self._ctx, row)
        if not logits:
            raise ModelError(f"llama.cpp has no logits at row {row}")
        self._data["id"] = np.arange(self._n_vocab, dtype=np.int32)
        self._data["logit"] = np.ctypeslib.as_array(logits, shape=(self._n_vocab,))
        self._data["p"] = 0.0
        array = self._array
        array.data = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)
        array.size, array.selected, array.sorted = self._n_vocab, -1, False
        llama_cpp.llama_sampler_apply(self._chain._chain, ctypes.byref(array))
        # Samplers may point `data` elsewhere (the binding's header says so); read where it points.
        view = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
        if self._greedy:
            return np.array([view["id"][array.selected]], dtype=np.int32), np.ones(1)
        return view["id"].copy(), view["p"].astype(np.float64)

    def close(self) -> None:
        self._chain.close()


SAMPLER_STAGES = ("top_k", "top_p", "min_p", "temperature", "dist")
"""The stages of chatapp's chain (Sampler) in llama.cpp's order; at temperature 0, "greedy" alone."""


class StagedSampler:
    """The session's sampler chain as llama.cpp's separate samplers, applied one after another to
    one candidate array with a snapshot after each: the same samplers, parameters and order as
    `Sampler` (so the same seed draws the same tokens), each one's effect visible. `dist` keeps its
    random state across `step` calls, one draw per token, as the turn's chain does."""

    def __init__(self, *, temperature: float, top_k: int, top_p: float, min_p: float, seed: int):
        if temperature <= 0:
            self.stages = (("greedy", llama_cpp.llama_sampler_init_greedy()),)
        else:
            self.stages = (
                ("top_k", llama_cpp.llama_sampler_init_top_k(top_k)),
                ("top_p", llama_cpp.llama_sampler_init_top_p(top_p, 1)),
                ("min_p", llama_cpp.llama_sampler_init_min_p(min_p, 1)),
                ("temperature", llama_cpp.llama_sampler_init_temp(temperature)),
                ("dist", llama_cpp.llama_sampler_init_dist(llama_cpp.LLAMA_DEFAULT_SEED if seed < 0 else seed)),
            )

    def step(self, logits: np.ndarray) -> tuple[int, list[tuple[str, np.ndarray]]]:
        """Apply every stage to all tokens' `logits`; returns the selected token and, per stage,
        its name and the candidates left (a copy; fields "id", "logit", "p"), in the order
        llama.cpp left them. Every stage is told the selected token afterwards (accept)."""
        n = len(logits)
        data = np.zeros(n, dtype=_TOKEN_DATA)
        data["id"] = np.arange(n, dtype=np.int32)
        data["logit"] = logits
        array = llama_cpp.llama_token_data_array(data=data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n,
                                                 selected=-1, sorted=False)
        snapshots = []
        for name, sampler in self.stages:
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            view = np.ctypeslib.as_array(array.data, shape=(array.size,)).view(_TOKEN_DATA)
            snapshots.append((name, view.copy()))
        if not 0 <= array.selected < array.size:
            raise ModelError("llama.cpp's sampler chain selected no token")
        token = int(snapshots[-1][1]["id"][array.selected])
        for _name, sampler in self.stages:
            llama_cpp.llama_sampler_accept(sampler, token)
        return token, snapshots

    def close(self) -> None:
        for _name, sampler in getattr(self, "stages", ()):
            llama_cpp.llama_sampler_free(sampler)
        self.stages = ()

    def __del__(self):
        self.close()
