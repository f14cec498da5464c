/* The chat page (http/page.html), linked into qwen35-http as one
 * NUL-terminated string: the daemon serves it with no file to install. */
    .section .rodata
    .global http_page_html
    .type http_page_html, @object
http_page_html:
    .incbin "http/page.html"
    .byte 0
    .size http_page_html, . - http_page_html
    .section .note.GNU-stack,"",@progbits
