#include "textflag.h"

// func prefetchLine(addr uintptr)
TEXT ·prefetchLine(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchLineW(addr uintptr)
TEXT ·prefetchLineW(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	// PREFETCHW (AX) — the assembler has no mnemonic. Every amd64 CPU Go
	// supports executes it (a NOP where unimplemented).
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08
	RET

// func prefetchLines(a, b uintptr)
TEXT ·prefetchLines(SB), NOSPLIT, $0-16
	MOVQ a+0(FP), AX
	MOVQ b+8(FP), BX
	PREFETCHT0 (AX)
	PREFETCHT0 (BX)
	RET
