package capture

// Pinned flags: `make generate` must reproduce the committed objects byte for byte.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -D__TARGET_ARCH_x86" -target bpfel -type exec_event -type exit_event -type lineage -type id_slot -type id_wire -type event_limit -type event_kind -type key_flag -type event_flag -type id_source -type stat_index -type lineage_flag -type exec_origin -type image_place correlator ../../bpf/correlator.bpf.c -- -I../../bpf/include

// The compat object, for kernels without task storage for tracing programs
// (< 5.11) or bpf_loop (< 5.17): chosen at load by probing (object.go).
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -D__TARGET_ARCH_x86 -DCORRELATOR_COMPAT" -target bpfel -no-global-types correlatorCompat ../../bpf/correlator.bpf.c -- -I../../bpf/include

// A second layout of struct lineage, for the upgrade handover test only.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -D__TARGET_ARCH_x86 -DTEST_LAYOUT" -target bpfel -no-global-types -output-suffix _test correlatorTestLayout ../../bpf/correlator.bpf.c -- -I../../bpf/include
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Wpadded -Werror -D__TARGET_ARCH_x86 -DTEST_LAYOUT -DCORRELATOR_COMPAT" -target bpfel -no-global-types -output-suffix _test correlatorTestLayoutCompat ../../bpf/correlator.bpf.c -- -I../../bpf/include
