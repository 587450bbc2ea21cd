#!/bin/bash
# A sweep's image made once, on the batch host of the first job that gets here (bench/runtimes/pyxis.py,
# apptainer.py, sarus.py):  image-once.sh KIND PRODUCT REFERENCE
#   enroot     enroot import of the registry image REFERENCE into the .sqsh PRODUCT
#   apptainer  apptainer build of REFERENCE (docker://, oras://, ...) into the .sif PRODUCT
#   sarusctl   sarusctl pull + migrate of REFERENCE into Sarus Suite's Parallax store (PRODUCT: a marker)
# Made under a lock beside PRODUCT, so jobs of the sweep that start together wait for the one making it, and
# into PRODUCT.part first, so a half-made image is never used. A failure prints one line naming the node
# and the image and exits 1.
set -uo pipefail
kind=$1 product=$2 image=$3
node=${SLURMD_NODENAME:-$(hostname)}
fail() { rm -f "$product.part"; echo "nanochat-bench: node $node: image $image: $*"; exit 1; }
if ! { mkdir -p "$(dirname "$product")" && exec 9>"$product.lock" && flock 9; }; then fail "cannot lock $product.lock"; fi
if [ -e "$product" ] && { [ -s "$product" ] || [ "$kind" = sarusctl ]; }; then
    echo "image $image: $product, made once for this sweep"
    exit 0
fi
rm -f "$product.part"
case $kind in
    enroot)
        enroot import -o "$product.part" "docker://$image" || fail "enroot import into $product failed (see its lines above)" ;;
    apptainer)
        apptainer build "$product.part" "$image" || fail "apptainer build of $product failed (see its lines above)" ;;
    sarusctl)
        # Sarus Suite is early access: the listing's format (a line with the repository and the tag) is assumed
        if ! sarusctl images 2>/dev/null | grep -F -- "${image%:*}" | grep -qF -- "${image##*:}"; then
            case $image in
                localhost/*) ;;  # built with Podman: only the store of the node it was built on holds it
                *) sarusctl pull "$image" || fail "sarusctl pull failed" ;;
            esac
            sarusctl migrate "$image" || fail "sarusctl migrate failed (an image built with Podman is migrated" \
                "where it was built: containers/sarus-suite-migrate.sh)"
        fi
        touch "$product.part" ;;
    *) fail "unknown kind $kind" ;;
esac
mv "$product.part" "$product" && echo "image $image: made into $product for this sweep"
