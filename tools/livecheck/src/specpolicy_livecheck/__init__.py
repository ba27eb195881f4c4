"""specpolicy's live check: the harness that runs the policies inside real SGLang and vLLM engines on a GPU
and checks what they did (``specpolicy-livecheck``; see tools/livecheck/README.md)."""
