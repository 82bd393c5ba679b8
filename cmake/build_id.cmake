# Run at every build (the mpitrain_build_id target): writes OUTPUT, the source of build_id(), from
# VERSION and the commit of SOURCE_DIR, "-dirty" where tracked files differ from it ("unknown"
# where SOURCE_DIR is not the top of a git checkout: an unpacked archive, maybe inside another
# repository). configure_file rewrites OUTPUT only when its text changes, so a build at the same
# commit compiles nothing again, and a new commit or edit recompiles this one file.
execute_process(COMMAND git rev-parse --show-toplevel --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
                OUTPUT_VARIABLE top_and_commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
string(REPLACE "\n" ";" top_and_commit "${top_and_commit}")
list(LENGTH top_and_commit lines)
file(REAL_PATH "${SOURCE_DIR}" source)
if(lines EQUAL 2)
  list(GET top_and_commit 0 top)
  list(GET top_and_commit 1 commit)
endif()
if(NOT lines EQUAL 2 OR NOT top STREQUAL source)
  set(commit "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SOURCE_DIR}
                  OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(changes)
    string(APPEND commit "-dirty")
  endif()
endif()
set(MPITRAIN_BUILD_ID "${VERSION}+${commit}")
configure_file(${SOURCE_DIR}/cmake/build_id.cpp.in ${OUTPUT} @ONLY)
