/*
 * dlsym and dlvsym as libtierrt.so exports them. Names that may be driver
 * or NCCL symbols ("cu...", "nccl...") go to the C code that answers for the
 * functions tierrt wraps. Every other lookup jumps (not calls) to the C library's own dlsym,
 * so the return address it sees is still the original caller's and
 * dlsym(RTLD_NEXT, ...) keeps meaning "next after the caller": a plain C
 * wrapper would make it "next after libtierrt.so" and could send another
 * library's interposer into itself.
 */
    .text

    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    testq %rsi, %rsi
    jz 1f
    cmpb $0x63, (%rsi)          /* 'c' */
    jne 2f
    cmpb $0x75, 1(%rsi)         /* 'u' */
    jne 1f
    jmp tierrt_dlsym_driver_symbol
2:  cmpb $0x6e, (%rsi)          /* "nccl", a byte at a time: never past the name's end */
    jne 1f
    cmpb $0x63, 1(%rsi)
    jne 1f
    cmpb $0x63, 2(%rsi)
    jne 1f
    cmpb $0x6c, 3(%rsi)
    jne 1f
    jmp tierrt_dlsym_driver_symbol
1:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call tierrt_libc_dlsym
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%rax
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, @function
dlvsym:
    .cfi_startproc
    testq %rsi, %rsi
    jz 1f
    cmpb $0x63, (%rsi)          /* 'c' */
    jne 2f
    cmpb $0x75, 1(%rsi)         /* 'u' */
    jne 1f
    jmp tierrt_dlvsym_driver_symbol
2:  cmpb $0x6e, (%rsi)          /* "nccl", a byte at a time: never past the name's end */
    jne 1f
    cmpb $0x63, 1(%rsi)
    jne 1f
    cmpb $0x63, 2(%rsi)
    jne 1f
    cmpb $0x6c, 3(%rsi)
    jne 1f
    jmp tierrt_dlvsym_driver_symbol
1:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    call tierrt_libc_dlvsym
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%rax
    .cfi_endproc
    .size dlvsym, .-dlvsym

    .section .note.GNU-stack,"",@progbits
