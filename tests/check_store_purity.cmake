# Fails when a pure source of the store protocol includes something that does I/O or signals.
# Run as: cmake -DROOT=<repo> -P check_store_purity.cmake
set(pure_files
  rendezvous/messages.hpp rendezvous/messages.cpp
  rendezvous/wire.hpp rendezvous/wire.cpp
  rendezvous/store_state.hpp rendezvous/store_state.cpp)
set(bad "")
foreach(f IN LISTS pure_files)
  file(STRINGS "${ROOT}/${f}" lines REGEX "^[ \t]*#[ \t]*include")
  foreach(line IN LISTS lines)
    if(line MATCHES "asio|boost/process|<csignal>|<signal.h>|sys/socket|<unistd.h>|<fstream>|spdlog")
      string(APPEND bad "  ${f}: ${line}\n")
    endif()
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "pure store sources include I/O headers:\n${bad}")
endif()
message(STATUS "store protocol sources are pure (${pure_files})")
