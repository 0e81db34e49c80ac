package main

// Every command's help ends by saying what it leaves in the kernel, so a
// person who runs one knows what stays after it exits
// (TestEveryCommandSaysWhatItLeaves).
const (
	kernelHelpPrefix = "What it leaves in the kernel: "
	leavesNothing    = kernelHelpPrefix + "nothing; it loads no eBPF programs or maps."
)
