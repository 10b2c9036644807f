/*
 * dlsym and dlvsym as libtierrt.so exports them, for AArch64: the same
 * contract as dlsym_trampoline_x86_64.S. Names that may be driver or NCCL
 * symbols ("cu...", "nccl...") branch to the C code that answers for the
 * functions tierrt wraps. Every other lookup branches (not links) to the C library's own
 * dlsym with lr restored, so the return address it reads is still the
 * original caller's and dlsym(RTLD_NEXT, ...) keeps meaning "next after the
 * caller": a plain C wrapper would make it "next after libtierrt.so" and
 * could send another library's interposer into itself.
 *
 * Branch protection follows the compiler's flags (-mbranch-protection=):
 * a "bti c" landing pad at each entry, lr signed while it sits on the stack,
 * and the GNU property note that lets the linker keep the library's BTI/PAC
 * marking. The final branch goes through x16 because BTI lets a "br x16"
 * (or x17) land on the "bti c" / "paciasp" that opens libc's dlsym; a "br"
 * through any other register would need a "bti j" there.
 */

#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define LANDING_PAD bti c
#define PROPERTY_BTI 1
#else
#define LANDING_PAD
#define PROPERTY_BTI 0
#endif

#if defined(__ARM_FEATURE_PAC_DEFAULT) && (__ARM_FEATURE_PAC_DEFAULT & 1)
#define SIGN_LR paciasp
#define AUTH_LR autiasp
#define CFI_PAC_KEY
#define CFI_RA_STATE .cfi_negate_ra_state
#define PROPERTY_PAC 2
#elif defined(__ARM_FEATURE_PAC_DEFAULT) && (__ARM_FEATURE_PAC_DEFAULT & 2)
#define SIGN_LR pacibsp
#define AUTH_LR autibsp
#define CFI_PAC_KEY .cfi_b_key_frame
#define CFI_RA_STATE .cfi_negate_ra_state
#define PROPERTY_PAC 2
#else
#define SIGN_LR
#define AUTH_LR
#define CFI_PAC_KEY
#define CFI_RA_STATE
#define PROPERTY_PAC 0
#endif

    .text

    .globl dlsym
    .type dlsym, %function
    .p2align 2
dlsym:
    .cfi_startproc
    CFI_PAC_KEY
    LANDING_PAD
    cbz x1, 1f
    ldrb w16, [x1]
    cmp w16, #0x63              /* 'c' */
    b.ne 2f
    ldrb w16, [x1, #1]
    cmp w16, #0x75              /* 'u' */
    b.ne 1f
    b tierrt_dlsym_driver_symbol
2:  cmp w16, #0x6e              /* "nccl", a byte at a time: never past the name's end */
    b.ne 1f
    ldrb w16, [x1, #1]
    cmp w16, #0x63
    b.ne 1f
    ldrb w16, [x1, #2]
    cmp w16, #0x63
    b.ne 1f
    ldrb w16, [x1, #3]
    cmp w16, #0x6c
    b.ne 1f
    b tierrt_dlsym_driver_symbol
1:  SIGN_LR
    CFI_RA_STATE
    /* Frame record at sp, handle and name above it: 32 bytes keeps sp 16-aligned. */
    stp x29, x30, [sp, #-32]!
    .cfi_def_cfa_offset 32
    .cfi_offset 29, -32
    .cfi_offset 30, -24
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl tierrt_libc_dlsym
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    .cfi_restore 29
    .cfi_restore 30
    .cfi_def_cfa_offset 0
    AUTH_LR
    CFI_RA_STATE
    br x16
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, %function
    .p2align 2
dlvsym:
    .cfi_startproc
    CFI_PAC_KEY
    LANDING_PAD
    cbz x1, 1f
    ldrb w16, [x1]
    cmp w16, #0x63              /* 'c' */
    b.ne 2f
    ldrb w16, [x1, #1]
    cmp w16, #0x75              /* 'u' */
    b.ne 1f
    b tierrt_dlvsym_driver_symbol
2:  cmp w16, #0x6e              /* "nccl", a byte at a time: never past the name's end */
    b.ne 1f
    ldrb w16, [x1, #1]
    cmp w16, #0x63
    b.ne 1f
    ldrb w16, [x1, #2]
    cmp w16, #0x63
    b.ne 1f
    ldrb w16, [x1, #3]
    cmp w16, #0x6c
    b.ne 1f
    b tierrt_dlvsym_driver_symbol
1:  SIGN_LR
    CFI_RA_STATE
    /* Frame record, then handle, name and version: 40 bytes, rounded to 48. */
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x0, x1, [sp, #16]
    str x2, [sp, #32]
    bl tierrt_libc_dlvsym
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldr x2, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_restore 29
    .cfi_restore 30
    .cfi_def_cfa_offset 0
    AUTH_LR
    CFI_RA_STATE
    br x16
    .cfi_endproc
    .size dlvsym, .-dlvsym

#if PROPERTY_BTI || PROPERTY_PAC
    /* The linker marks the library BTI/PAC only when every input says so. */
    .pushsection .note.gnu.property, "a"
    .p2align 3
    .word 4                     /* name size */
    .word 16                    /* descriptor size */
    .word 5                     /* NT_GNU_PROPERTY_TYPE_0 */
    .asciz "GNU"
    .word 0xc0000000            /* GNU_PROPERTY_AARCH64_FEATURE_1_AND */
    .word 4
    .word PROPERTY_BTI | PROPERTY_PAC
    .word 0
    .popsection
#endif

    .section .note.GNU-stack,"",%progbits
