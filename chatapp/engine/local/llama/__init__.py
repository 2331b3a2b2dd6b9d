"""llama.cpp through llama-cpp-python: the one package that imports llama_cpp.

Everything else in chatapp talks to llama.cpp through the names below, so the rest of the engine
stays testable and the binding's quirks stay in one place. Its modules follow what llama.cpp
gives: the loaded model and its context (`runtime`), the sampler chain (`sampler`), batches
(`batch`), the drafting verify target (`verify`), the eval-callback taps (`taps`), and, beside
them as llama.cpp keeps `tools/mtmd/` beside `src/`, the image encoder.
"""

from chatapp.engine.local.llama.runtime import *  # noqa: F403
