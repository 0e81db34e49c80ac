package capture

// Pinned flags: `make generate` must reproduce the committed objects byte for byte.
//
// One object per architecture: -target amd64,arm64 compiles each source twice
// and writes <stem>_x86_bpfel.{go,o} (//go:build 386 || amd64) and
// <stem>_arm64_bpfel.{go,o} (//go:build arm64), so GOARCH picks the object
// embedded at build time. bpf2go itself adds -D__TARGET_ARCH_x86 or
// -D__TARGET_ARCH_arm64 per target; the cflags must not name one, or the
// arm64 object would be built with both (bpf_tracing.h takes x86 first).
// The -type Go types are generated into both files, from the same C structs
// (no arch-dependent field: see docs/kernels.md, "Architectures").
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror" -target amd64,arm64 -type exec_event -type exit_event -type lineage -type id_slot -type id_wire -type event_limit -type event_kind -type key_flag -type event_flag -type id_source -type stat_index -type lineage_flag -type exec_origin -type image_place correlator ../../bpf/correlator.bpf.c -- -I../../bpf/include

// The compat object, for kernels without task storage for tracing programs
// (< 5.11) or bpf_loop (< 5.17): chosen at load by probing (object.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -DCORRELATOR_COMPAT" -target amd64,arm64 -no-global-types correlatorCompat ../../bpf/correlator.bpf.c -- -I../../bpf/include

// A second layout of struct lineage, for the upgrade handover test only.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -DTEST_LAYOUT" -target amd64,arm64 -no-global-types -output-suffix _test correlatorTestLayout ../../bpf/correlator.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -DTEST_LAYOUT -DCORRELATOR_COMPAT" -target amd64,arm64 -no-global-types -output-suffix _test correlatorTestLayoutCompat ../../bpf/correlator.bpf.c -- -I../../bpf/include
