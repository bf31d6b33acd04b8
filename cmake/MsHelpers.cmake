# Helpers that give every library module, binary and test the same flags and wiring.

function(ms_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>)
  # GCC 12 at -O3 reports a bogus -Wrestrict inside std::string's operator+ (GCC bug 105329).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>)
  endif()
  if(MS_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# ms_add_module(<name> SOURCES ... DEPS ...): static library ms_<name>, namespace ms::<name>,
# included as "<name>/header.h" from lib/.
function(ms_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ms_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ms_${name} PUBLIC ${PROJECT_SOURCE_DIR}/lib)
  target_link_libraries(ms_${name} PUBLIC ${ARG_DEPS})
  ms_set_warnings(ms_${name})
endfunction()

function(ms_add_binary name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
  ms_set_warnings(${name})
endfunction()

# Environment every multi-rank test runs with: oversubscribed ranks yield, one BLAS thread each,
# and no cross-memory attach (containers often forbid it).
set(MS_MPI_TEST_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_mpi_yield_when_idle=1
  OMPI_MCA_btl_vader_single_copy_mechanism=none
  OMPI_MCA_rmaps_base_oversubscribe=1
  OPENBLAS_NUM_THREADS=1
  OMP_NUM_THREADS=1)

# ms_add_unit_test(<name> SOURCES ... DEPS ... [TIMEOUT s]): one GoogleTest binary whose cases
# are registered individually with ctest, labelled "unit".
function(ms_add_unit_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 60)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/lib)
  ms_set_warnings(${name})
  gtest_discover_tests(${name}
    TEST_PREFIX "${name}:"
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS unit TIMEOUT ${ARG_TIMEOUT}
               ENVIRONMENT "OPENBLAS_NUM_THREADS=1"
               ENVIRONMENT_MODIFICATION "MS_SOURCE_DIR=set:${PROJECT_SOURCE_DIR}")
endfunction()

# ms_add_mpi_test(<name> SOURCES ... DEPS ... RANKS 1 2 3 4 [TIMEOUT s]): one GoogleTest binary
# (its main initializes MPI, tests/mpi_test_main.cc) run under mpirun once per rank count.
# Every such test holds the "mpi" resource lock so no two run at once on a small machine.
function(ms_add_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;LABEL" "SOURCES;DEPS;RANKS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_LABEL)
    set(ARG_LABEL mpi)
  endif()
  add_executable(${name} ${ARG_SOURCES} ${PROJECT_SOURCE_DIR}/tests/mpi_test_main.cc)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} ms_comm GTest::gtest)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/lib)
  ms_set_warnings(${name})
  foreach(np IN LISTS ARG_RANKS)
    add_test(NAME ${name}.np${np}
      COMMAND ${MS_MPIEXEC} --oversubscribe -np ${np} $<TARGET_FILE:${name}>)
    set_tests_properties(${name}.np${np} PROPERTIES
      LABELS ${ARG_LABEL} TIMEOUT ${ARG_TIMEOUT} RESOURCE_LOCK mpi
      ENVIRONMENT "${MS_MPI_TEST_ENV};MS_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  endforeach()
endfunction()
