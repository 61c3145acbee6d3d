# Export artifacts (docs/architecture.md, "Export artifacts"): the export side of
# ember.export and the C++ loader (include/ember/export/model.h), part of the
# ember_torch library; included from src/torch/CMakeLists.txt.
set(_ember_export_dir "${PROJECT_SOURCE_DIR}/src/export")
set(EMBER_EXPORT_SOURCES
  "${_ember_export_dir}/program.cpp"         # a bucket's program text: print, parse, compile
  "${_ember_export_dir}/export_program.cpp"  # a captured program -> the parts ember.export stores
  "${_ember_export_dir}/model.cpp")          # ember::LoadModel / ember::Model::Run
target_sources(ember_torch PRIVATE ${EMBER_EXPORT_SOURCES}
  "${_ember_export_dir}/artifact_file.cc")   # the container: entries checked by size + SHA-256
target_include_directories(ember_torch PRIVATE "${PROJECT_SOURCE_DIR}/src")
if(EMBER_TORCH_UNITY)
  set_source_files_properties(${EMBER_EXPORT_SOURCES} PROPERTIES UNITY_GROUP export)
endif()
set_source_files_properties("${_ember_export_dir}/artifact_file.cc" PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
# ember-run-model: loads an artifact and runs it with no Python (examples/export).
add_subdirectory("${PROJECT_SOURCE_DIR}/examples/export" "${PROJECT_BINARY_DIR}/examples/export")
