# schema/proto.cmake — generate the protobuf-c code for schema/scdb.proto at
# build time (into the build tree; generated code is never committed) and
# build it as the library scdb_proto.  Included from broker/CMakeLists.txt.
find_program(SCDB_PROTOC_C protoc-c REQUIRED)
set(SCDB_PROTO_SRC ${CMAKE_SOURCE_DIR}/schema/scdb.proto)
set(SCDB_PROTO_GEN ${CMAKE_BINARY_DIR}/schema-gen)
add_custom_command(
  OUTPUT ${SCDB_PROTO_GEN}/scdb.pb-c.c ${SCDB_PROTO_GEN}/scdb.pb-c.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${SCDB_PROTO_GEN}
  COMMAND ${SCDB_PROTOC_C} --c_out=${SCDB_PROTO_GEN}
          --proto_path=${CMAKE_SOURCE_DIR}/schema ${SCDB_PROTO_SRC}
  DEPENDS ${SCDB_PROTO_SRC}
  COMMENT "protoc-c schema/scdb.proto"
  VERBATIM)
add_library(scdb_proto STATIC ${SCDB_PROTO_GEN}/scdb.pb-c.c)
target_include_directories(scdb_proto PUBLIC ${SCDB_PROTO_GEN})
target_link_libraries(scdb_proto PUBLIC PkgConfig::PROTOBUFC)
set_target_properties(scdb_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)
