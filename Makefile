# `make test`: install what the tests need when it is missing, then the import contracts, the Rust tests and
# the default pytest run (scripts/test says what each step does). `make test-all` adds the tests marked slow
# (what CI runs). Arguments for pytest: make test PYTEST_ARGS="-k sweep".
.PHONY: test test-all

test:
	./scripts/test -- $(PYTEST_ARGS)

test-all:
	./scripts/test --slow -- $(PYTEST_ARGS)
