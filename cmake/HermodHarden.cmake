# Hardened code generation and linking (HM_HARDEN, default ON).
#
# Hermod parses bytes from peers it does not trust. Its own checks are the
# defence; these flags are the second line, the ones a distribution would add
# (dpkg-buildflags' "hardening=+all"), so that a bug left in a parser is a
# crash rather than a foothold:
#   -fstack-protector          canaries in functions with char arrays on the
#                              stack (URIs, names, log lines: where a string
#                              overflow would happen). Not -strong: that also
#                              guards every function that takes a local's
#                              address, 182 of them here, the fast paths among
#                              them (the canary is set up even on an early
#                              return): +12% of Hermod's own instructions per
#                              RPC (callgrind). Plain: 49 functions, no
#                              measurable cost.
#   -D_FORTIFY_SOURCE=2        checked memcpy/snprintf/... where sizes are known
#                              (optimised builds only; not with sanitizers,
#                              which check the same calls themselves)
#   -fstack-clash-protection   stack probes for large frames
#   -fcf-protection            x86 CET landing pads (a no-op on older CPUs)
#   -z relro -z now            the GOT resolved at load and made read-only,
#                              so a write primitive cannot redirect calls
#   -z noexecstack
# docs/ARCHITECTURE.md, "Hardened build", has the measurements. Flags the
# compiler does not know are left out, each checked.
option(HM_HARDEN "Build with stack protector, FORTIFY_SOURCE, full RELRO" ON)
if(NOT HM_HARDEN)
  return()
endif()

include(CheckCCompilerFlag)
foreach(flag -fstack-protector -fstack-clash-protection -fcf-protection)
  string(MAKE_C_IDENTIFIER "HM_HAS${flag}" var)
  check_c_compiler_flag(${flag} ${var})
  if(${var})
    add_compile_options(${flag})
  endif()
endforeach()

if(NOT HM_SANITIZE)
  # -U first: a caller's CFLAGS may define it already (redefinition warns).
  add_compile_options("$<$<NOT:$<CONFIG:Debug>>:-U_FORTIFY_SOURCE;-D_FORTIFY_SOURCE=2>")
endif()

add_link_options(-Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack)
