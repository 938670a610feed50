#include "textflag.h"

// func prefetchLine(addr uintptr)
TEXT ·prefetchLine(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetchSpan(addr uintptr)
TEXT ·prefetchSpan(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	PREFETCHT0 71(AX)
	RET

// func prefetchSpanW(addr uintptr)
TEXT ·prefetchSpanW(SB), NOSPLIT, $0-8
	MOVQ addr+0(FP), AX
	// PREFETCHW (AX); PREFETCHW 71(AX) — the assembler has no mnemonic.
	// Every amd64 CPU Go supports executes it (a NOP where unimplemented).
	BYTE $0x0f; BYTE $0x0d; BYTE $0x08
	BYTE $0x0f; BYTE $0x0d; BYTE $0x48; BYTE $0x47
	RET
