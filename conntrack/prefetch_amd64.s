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

// func prefetchN(p *uintptr, n int)
TEXT ·prefetchN(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	TESTQ CX, CX
	JLE done
loop:
	MOVQ (AX), BX
	PREFETCHT0 (BX)
	ADDQ $8, AX
	DECQ CX
	JNZ loop
done:
	RET
