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
#: the live results: reports, raw tarballs, the GPU image's package list
RESULTS = REPO / "docs" / "gpu-results"
#: the GPU host image's ``pip freeze`` (what a bundle need not carry)
IMAGE_PACKAGES = RESULTS / "gpu-image-packages-2026-12-02.txt"
#: the SGLang live check's report (``analyze --json``) and the vLLM one
SGLANG_REPORT = RESULTS / "report.json"
VLLM_REPORT = RESULTS / "report-vllm.json"
