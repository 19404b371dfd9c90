# Sourced by run.sh and overhead.sh (needs ROOT and WORK): the libcupti
# copies at hand on the GPU machine. The toolkit's (CUDA 13.0), Triton's
# (CUDA 12), and those a run carries, xz-compressed, in
# .gpu-extra/cupti/VERSION/ (tests/gpu/stage_cupti.sh puts them there from
# the registry's wheels), unpacked under $WORK/cupti/VERSION/ when asked.

# The library of one copy by its tag: `toolkit`, `triton` or a release.
cupti_lib() {  # cupti_lib TAG
    case "$1" in
        toolkit) ls /usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13 2>/dev/null ;;
        triton)
            local triton
            triton=$(python3 -c 'import os, triton; print(os.path.dirname(triton.__file__))' 2>/dev/null) \
                && find "$triton" -name 'libcupti.so.12' 2>/dev/null | head -1 ;;
        *)
            local xz so
            xz=$(ls "$ROOT"/.gpu-extra/cupti/"$1"/libcupti.so.*.xz 2>/dev/null) || return 1
            so="$WORK/cupti/$1/$(basename "$xz" .xz)"
            [ -f "$so" ] || { mkdir -p "$WORK/cupti/$1" && xz -dc "$xz" >"$so"; }
            echo "$so" ;;
    esac
}

# The tags of every copy at hand (a release, `triton`, `toolkit`: the name
# of its traces and table rows), or, with CUPTIS="13.4.92 toolkit ...",
# those of them only.
cupti_tags() {
    local tags=${CUPTIS:-} xz tag
    if [ -z "$tags" ]; then
        tags="toolkit triton"
        for xz in "$ROOT"/.gpu-extra/cupti/*/libcupti.so.*.xz; do
            [ -f "$xz" ] && tags="$tags $(basename "$(dirname "$xz")")"
        done
    fi
    for tag in $tags; do
        [ -n "$(cupti_lib "$tag")" ] && echo "$tag"
    done
}
