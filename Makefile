# Convenience targets; the README's two commands are scripts/demo.sh and
# scripts/test.sh.
PREFIX ?= /usr/local
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/sanqos/sanqos/internal/version.Version=$(VERSION)

.PHONY: build test install clean
build:
	go build -ldflags '$(LDFLAGS)' -o bin/sanqos ./cmd/sanqos

test:
	bash scripts/test.sh

install: build
	install -D -m 0755 bin/sanqos $(DESTDIR)$(PREFIX)/bin/sanqos

clean:
	rm -rf bin
