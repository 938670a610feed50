#include "textflag.h"

// func tagSlots(w *[bucketWords]uint32, tag, mask uint32) uint32
TEXT ·tagSlots(SB), NOSPLIT, $0-20
	MOVQ w+0(FP), AX
	MOVL tag+8(FP), BX
	MOVQ BX, X0
	PSHUFD $0, X0, X0 // tag in every lane
	MOVL mask+12(FP), BX
	MOVQ BX, X1
	PSHUFD $0, X1, X1 // mask in every lane
	MOVOU 0(AX), X2   // slots 0-3 (0 is the header)
	MOVOU 16(AX), X3  // 4-7
	MOVOU 32(AX), X4  // 8-11
	MOVOU 48(AX), X5  // 12-15
	PAND X1, X2
	PAND X1, X3
	PAND X1, X4
	PAND X1, X5
	PCMPEQL X0, X2    // a lane of all ones where the slot has the tag
	PCMPEQL X0, X3
	PCMPEQL X0, X4
	PCMPEQL X0, X5
	PACKSSLW X3, X2   // 32-bit lanes to 16 (all ones stays all ones)
	PACKSSLW X5, X4
	PACKSSWB X4, X2   // to 8: byte j is slot j
	PMOVMSKB X2, BX
	ANDL $0xfffe, BX  // not the header
	MOVL BX, ret+16(FP)
	RET
