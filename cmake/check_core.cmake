# Fails when a file of DIR (src/core) includes a transport, thread or clock
# header or reads a clock: the core's inputs are arguments ("now" included).
file(GLOB files ${DIR}/*.c ${DIR}/*.h)
set(bad "")
foreach(f ${files})
  file(STRINGS ${f} lines REGEX
       "#include *<(hiredis/|sys/socket\\.h|netinet/|poll\\.h|pthread\\.h|time\\.h|sys/time\\.h|uv\\.h|event2/)|(clock_gettime|gettimeofday|xf__now_[a-z]+|pthread_[a-z_]+|nanosleep|socket|poll) *\\(")
  foreach(l ${lines})
    list(APPEND bad "${f}: ${l}")
  endforeach()
endforeach()
if(bad)
  string(REPLACE ";" "\n" bad "${bad}")
  message(FATAL_ERROR "src/core must not do I/O, threads or clocks:\n${bad}")
endif()
message(STATUS "src/core: no transport, thread or clock (${DIR})")
