# Aliases for commands that also work bare (`just` is optional).

# Build the host, the CLI and (through build scripts) every guest.
build:
    cargo build --workspace

# The test suite: unit tests and the integration tests against guests built from source.
test:
    cargo test --workspace
    cargo test --manifest-path guest-tools/Cargo.toml -p toolcage-guest -p toolcage-fs -p toolcage-calc -p toolcage-fetch

# Formatting and clippy, warnings denied, on both workspaces.
lint:
    cargo fmt --all -- --check
    cargo fmt --manifest-path guest-tools/Cargo.toml --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings
    cargo clippy --manifest-path guest-tools/Cargo.toml --workspace --release --target wasm32-wasip2 -- -D warnings

# Build the standard toolset into target/tools/, to drop into any tools directory.
tools:
    rustup target add wasm32-wasip2
    cargo build --manifest-path guest-tools/Cargo.toml --release --target wasm32-wasip2 --target-dir target/guest-tools -p toolcage-fs -p toolcage-calc -p toolcage-fetch
    mkdir -p target/tools
    cp target/guest-tools/wasm32-wasip2/release/toolcage_fs.wasm target/tools/fs.wasm
    cp target/guest-tools/wasm32-wasip2/release/toolcage_calc.wasm target/tools/calc.wasm
    cp target/guest-tools/wasm32-wasip2/release/toolcage_fetch.wasm target/tools/fetch.wasm

# The book (docs/): build it into docs/book, and run its tests (examples, config reference, links).
book:
    mdbook build docs
    cargo test -p toolcage-tests --test all -- docs::

# Run the bundled grep over this repository, mounted read-only at /workspace.
demo:
    cargo run -p toolcage -- --mount .:/workspace call grep '{"pattern": "first wins", "path": "/workspace/host/src"}'
    cargo run -p toolcage -- call calc '{"expression": "2 ^ 10 - sqrt(16)"}'

# Benchmarks (tests/benches): per call, start-up, a first call on an empty cache, the toolset, MCP, reloads, script guests, and the soak.
bench:
    cargo bench -p toolcage-tests
