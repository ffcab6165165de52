# Sourced by the scripts: one cargo target directory outside the clone, shared by the
# quick start, the tests and CI, so a second run rebuilds nothing.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/tessera/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
