# Checks where the hang watchdog's MPI_ definitions live (include/distop/comm/watchdog.hpp): none
# in libdistop, so that a program without distop::watchdog can use a profiler that interposes MPI;
# all in the distop::watchdog archive; and, in a program linked with it, exported, so that a shared
# libdistop's calls reach them. cmake -DNM=... -DLIBRARY=... -DWATCHDOG=... -DPROGRAM=... -P this
cmake_minimum_required(VERSION 3.25)  # policies: if(IN_LIST)

function(defined_symbols file dynamic out)
  set(flags --defined-only)
  if(dynamic)
    list(PREPEND flags -D)
  endif()
  execute_process(COMMAND ${NM} ${flags} ${file} OUTPUT_VARIABLE text RESULT_VARIABLE rc
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} ${flags} ${file} failed (${rc}): ${err}")
  endif()
  string(REGEX MATCHALL "[ \t][A-Za-z][ \t]P?MPI_[A-Za-z_]+" hits "${text}")
  list(TRANSFORM hits REPLACE "^[ \t][A-Za-z][ \t]" "")
  set(${out} ${hits} PARENT_SCOPE)
endfunction()

# A shared libdistop's interface is its dynamic symbol table; a static one's, its objects' symbols.
set(shared OFF)
if(LIBRARY MATCHES "\\.so(\\.|$)")
  set(shared ON)
endif()
defined_symbols(${LIBRARY} ${shared} in_library)
list(FILTER in_library INCLUDE REGEX "^MPI_")
if(in_library)
  list(JOIN in_library " " names)
  message(FATAL_ERROR "${LIBRARY} defines ${names}: MPI_ definitions belong in distop::watchdog")
endif()

set(interposed MPI_Wait MPI_Waitall MPI_Recv MPI_Send MPI_Barrier MPI_Bcast MPI_Allreduce
               MPI_Alltoallv MPI_Comm_dup)
defined_symbols(${WATCHDOG} OFF in_watchdog)
foreach(name IN LISTS interposed)
  if(NOT name IN_LIST in_watchdog)
    message(FATAL_ERROR "${WATCHDOG} does not define ${name}")
  endif()
endforeach()

if(shared)
  defined_symbols(${PROGRAM} ON in_program)
  foreach(name IN ITEMS MPI_Barrier MPI_Allreduce)
    if(NOT name IN_LIST in_program)
      message(FATAL_ERROR "${PROGRAM}, linked with distop::watchdog, exports no ${name}: "
                          "libdistop's calls would bypass the watchdog")
    endif()
  endforeach()
endif()
message(STATUS "no MPI_ function in ${LIBRARY}; distop::watchdog defines them")
