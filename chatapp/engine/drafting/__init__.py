"""Speculative decoding's algorithms: n-gram lookup, the draft-and-verify loop and the policy
that sizes drafts from measured batch costs. Nothing here touches llama.cpp."""
