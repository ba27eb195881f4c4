"""Where the live check finds the repository and its recorded results, in one place.

The tool runs from a source checkout (the GPU host gets a copy of the repository) or installed; the
repository-relative defaults below hold for the checkout, and every command that reads them takes the path
as an argument too.
"""

from __future__ import annotations

from pathlib import Path

#: the package folder (tools/livecheck/src/specpolicy_livecheck) and its shell scripts
PACKAGE = Path(__file__).resolve().parent
SCRIPTS = PACKAGE / "sh"
#: the folder a child process needs on PYTHONPATH to import this very copy of the package
SOURCE_ROOT = PACKAGE.parent
#: the repository root of a source checkout (tools/livecheck/src/specpolicy_livecheck -> four up)
REPO = PACKAGE.parents[3]
#: the test policies' project (a distribution of its own: its entry points register test-only policies)
POLICIES_PROJECT = PACKAGE.parents[1] / "policies"
#: the live results: one folder per measurement run (reports, raw data, notes)
RESULTS = REPO / "results"
#: the GPU host image's ``pip freeze`` (what a bundle need not carry)
IMAGE_PACKAGES = RESULTS / "2026-12-02-sglang-0.5.12.post1-run7" / "gpu-image-packages-2026-12-02.txt"
#: the latest SGLang report (``analyze --json`` and the side-by-side sections) and the vLLM one
SGLANG_REPORT = RESULTS / "2026-12-06-sglang-0.5.12.post1-paired" / "report.json"
VLLM_REPORT = RESULTS / "2026-12-06-vllm-0.26.0-v1-runner" / "report-vllm.json"
