# Two entry points: `make run` (API + Dagster UI with a demo model) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint install bubblewrap contracts clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) bubblewrap

# The sandbox of a model's own training code (the demo's loan-default) needs bubblewrap:
# installed from Debian's package where apt-get is there and we are root (or sudo needs no
# password); otherwise one line says so, and `marketplace dev` warns again (docs/sandbox.md).
BWRAP_HINT := bubblewrap (bwrap) is not installed: evaluations of the loan-default demo model \
	will fail until it is; install it (Debian/Ubuntu: sudo apt-get install bubblewrap), see \
	docs/sandbox.md
bubblewrap:
	@if command -v bwrap >/dev/null; then :; \
	elif ! command -v apt-get >/dev/null; then echo "make: $(BWRAP_HINT)"; \
	else \
		if [ "$$(id -u)" = 0 ]; then sudo=; \
		elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"; \
		else echo "make: $(BWRAP_HINT)"; exit 0; fi; \
		echo "make: installing bubblewrap (the sandbox of models' own training code)"; \
		$$sudo apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null \
		|| { $$sudo apt-get update -qq >/dev/null \
			&& $$sudo apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } \
		|| echo "make: apt-get could not install it; $(BWRAP_HINT)"; \
	fi

# The reward contracts' compiler, OpenZeppelin, the Merkle-tree library and the local chain
# (anvil) come from npm, pinned in contracts/package-lock.json (docs/settlement.md). Without
# Node, settlement stays off and `marketplace dev` says how to turn it on.
contracts:
	@if ! command -v npm >/dev/null; then echo "make: npm is missing; settlement stays off"; \
	elif [ ! contracts/node_modules/.package-lock.json -nt contracts/package-lock.json ]; then \
		cd contracts && npm ci --no-audit --no-fund --loglevel=error; fi

run: $(STAMP) bubblewrap contracts
	$(BIN)/marketplace dev

test: $(STAMP) contracts
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy --strict pipeline
	$(BIN)/lint-imports --no-logo

clean:
	rm -rf $(VENV) .marketplace contracts/node_modules
