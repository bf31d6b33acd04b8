# The toolkit version and the git revision are baked in at build time (not configure time), so a
# binary always reports the revision it was built from. The generated header is rewritten only
# when its content changes, so an unchanged revision triggers no rebuild.
set(MS_GENERATED_DIR ${PROJECT_BINARY_DIR}/generated)
add_custom_target(ms_version_header ALL
  COMMAND ${CMAKE_COMMAND}
    -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DOUTPUT=${MS_GENERATED_DIR}/ms_build_info.h
    -DVERSION=${PROJECT_VERSION}
    -P ${PROJECT_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${MS_GENERATED_DIR}/ms_build_info.h
  COMMENT "Recording the git revision")
