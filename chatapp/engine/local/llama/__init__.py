"""llama.cpp through llama-cpp-python: the one package that imports llama_cpp.

Everything else in chatapp talks to llama.cpp through the names below, so the rest of the engine
stays testable and the binding's quirks stay in one place. Its modules follow what llama.cpp
gives: the loaded model and its context (`runtime`), the sampler chain (`sampler`), batches
(`batch`), the drafting verify target (`verify`), the eval-callback taps (`taps`), and, beside
them as llama.cpp keeps `tools/mtmd/` beside `src/`, the image encoder, meeting the text path
at the batch.
"""

from chatapp.engine.local.llama.batch import fill_batch, first_output
from chatapp.engine.local.llama.runtime import (
    KV_GGML_TYPES, LlamaRuntime, LoadOptions, PerfCounters, RuntimeInfo, backend_name, can_remove_cells,
    gpu_offload_supported, llama_cpp_build, silence_llama_logs, versions)
from chatapp.engine.local.llama.sampler import (
    SAMPLER_STAGES, ChainDistribution, Sampler, StagedSampler)
from chatapp.engine.local.llama.schema_gbnf import call_gbnf
from chatapp.engine.local.llama.taps import (
    CAPTURE_BATCH, CAPTURE_KV_TYPE, CAPTURE_SOFT_MAX_BYTES, TapContext, capture_batch, has_eval_callback,
    model_n_head, replay_soft_max)
from chatapp.engine.local.llama.verify import VerifyTarget

__all__ = [
    "CAPTURE_BATCH", "CAPTURE_KV_TYPE", "CAPTURE_SOFT_MAX_BYTES", "KV_GGML_TYPES", "SAMPLER_STAGES",
    "ChainDistribution", "LlamaRuntime", "LoadOptions", "PerfCounters", "RuntimeInfo", "Sampler", "StagedSampler",
    "TapContext", "VerifyTarget", "backend_name", "call_gbnf", "can_remove_cells", "capture_batch", "fill_batch",
    "first_output", "gpu_offload_supported", "has_eval_callback", "llama_cpp_build", "model_n_head",
    "replay_soft_max", "silence_llama_logs", "versions",
]
