# Sourced by the fashion_mnist tests: writes tiny Fashion-MNIST-shaped IDX files.
#   tiny_split DIR SPLIT IMAGES LABEL...   DIR/SPLIT-images-idx3-ubyte.gz with IMAGES
#                                          28x28 images, DIR/SPLIT-labels-idx1-ubyte.gz
#                                          with the given labels (as many as given)
#   tiny_dataset DIR [TRAIN [TEST]]        a consistent pair of splits (default 64 and 16
#                                          images, labels cycling 0..9)
# TINY_SIDE (default 28) sets the images' rows and columns.
byte() { printf "\\$(printf '%03o' "$1")"; }
be32() { byte $(($1 >> 24 & 255)); byte $(($1 >> 16 & 255)); byte $(($1 >> 8 & 255)); byte $(($1 & 255)); }
tiny_split() {
  local dir=$1 split=$2 n=$3 label
  shift 3
  mkdir -p "$dir"
  # Pixels: a repeating ramp, so that images are not all zeros (deterministic).
  local side=${TINY_SIDE:-28}
  { printf '\x00\x00\x08\x03'; be32 "$n"; be32 "$side"; be32 "$side"
    head -c $((n * side * side)) < <(while :; do printf '%s' '0123456789abcdefghijklmnopqrstuvwxyz'; done)
  } | gzip -n >"$dir/$split-images-idx3-ubyte.gz"
  { printf '\x00\x00\x08\x01'; be32 $#
    for label; do byte "$label"; done
  } | gzip -n >"$dir/$split-labels-idx1-ubyte.gz"
}
tiny_labels() { local i; for ((i = 0; i < $1; i++)); do echo $((i % 10)); done; }
tiny_dataset() {
  tiny_split "$1" train "${2:-64}" $(tiny_labels "${2:-64}")
  tiny_split "$1" t10k "${3:-16}" $(tiny_labels "${3:-16}")
}
