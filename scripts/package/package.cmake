# scripts/package/package.cmake — what an install adds beyond the programs
# and the library (their own folders install those, the unit and the
# service's configuration: broker/, cli/, client/, python/), and the Debian
# package.
#
#   cmake --install build --prefix P     P/bin/scdb finds P/share/scdb
#   cd build && cpack -G DEB             scdb_<version>_amd64.deb, prefix /usr
#
# <prefix>/share/scdb: the bundled model family, held-out texts, codebook,
# pairs and policy (data/), the plot scripts the benches call (tools/), and
# the Python side of `scdb bench python` (python/).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/data/ DESTINATION ${CMAKE_INSTALL_DATADIR}/scdb
  PATTERN ".*" EXCLUDE)
install(FILES ${CMAKE_SOURCE_DIR}/tools/plot_evict.py ${CMAKE_SOURCE_DIR}/tools/plot_quality.py
  ${CMAKE_SOURCE_DIR}/tools/plot_train_policy.py ${CMAKE_SOURCE_DIR}/tools/policy_ablate.py
  ${CMAKE_SOURCE_DIR}/tools/plot_llama.py
  ${CMAKE_SOURCE_DIR}/tools/train_family.py ${CMAKE_SOURCE_DIR}/tools/plot_fidelity.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/scdb/tools)
# `scdb bench python`: its Python side and the PyTorch examples it imports
# (torch_family.py imports tools/train_family.py's Model)
install(FILES ${CMAKE_SOURCE_DIR}/python/bench_python.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/scdb/python)
install(FILES ${CMAKE_SOURCE_DIR}/python/examples/torch_family.py
  ${CMAKE_SOURCE_DIR}/python/examples/scdb_broker.py ${CMAKE_SOURCE_DIR}/python/examples/fanout.py
  ${CMAKE_SOURCE_DIR}/python/examples/scdb_paths.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/scdb/python/examples)

# llama.cpp (the pinned release scripts/install-llama.sh fetched, when the
# build has it): its libraries and CPU backends beside nothing else of the
# system, in <libdir>/scdb/llama (the scdb command's INSTALL_RPATH; the
# backends are found beside libllama at run time), with their licences.
if(SCDB_HAVE_LLAMA)
  file(GLOB _scdb_llama_libs "${SCDB_LLAMA_DIR}/lib/lib*.so")
  install(FILES ${_scdb_llama_libs} DESTINATION ${CMAKE_INSTALL_LIBDIR}/scdb/llama)
  install(DIRECTORY "${SCDB_LLAMA_DIR}/licenses/" DESTINATION ${CMAKE_INSTALL_DOCDIR}/llama.cpp)
  install(FILES "${SCDB_LLAMA_DIR}/VERSION" DESTINATION ${CMAKE_INSTALL_DOCDIR}/llama.cpp)
  # dpkg-shlibdeps resolves them inside the package, not from a Debian one
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/scdb/llama")
endif()

set(CPACK_PACKAGE_NAME scdb)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "scdb")
set(CPACK_PACKAGE_CONTACT "scdb maintainers <scdb@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "sidecar cache broker for LLM serving (semantic cache distillation, learned KV eviction)")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "scdb keeps long shared prefixes of a producer model as compact semantic codes and
 decodes them into the KV space of fine-tuned specialists of the same
 architecture, straight into their shared-memory KV caches; it keeps live
 caches within a budget with a learned eviction policy.  This package has the
 scdb command, the scdb-broker daemon with its systemd unit and default
 configuration, libscdb (shared, static, headers, pkg-config and CMake files),
 the Python module, and the bundled model family, codebook, pairs and policy
 in /usr/share/scdb.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)          # what CPACK_SET_DESTDIR installs with
# install with DESTDIR=<staging> and the prefix /usr, so the unit and the
# configuration written at install time name /usr/bin and /etc (not the
# staging folder)
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)            # scdb_0.2.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
# The Python module (built for one interpreter: python/CMakeLists.txt) needs
# that python3 to be imported at all and python3-numpy for arenas (it
# imports numpy when it first makes one); the broker, the scdb command and
# libscdb need neither, so they are Recommends (installed by default, not
# forced).  The PyTorch examples and `scdb bench python` also want torch.
if(SCDB_PYTHON_INSTALL_DIR MATCHES "python3\\.([0-9]+)/")
  math(EXPR _scdb_py_next "${CMAKE_MATCH_1} + 1")
  set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "python3 (>= 3.${CMAKE_MATCH_1}~), python3 (<< 3.${_scdb_py_next}), python3-numpy")
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-torch")
endif()
# libscdb.so lands in /usr/lib: the `triggers` file activates libc-bin's
# ldconfig trigger (our own postinst / postrm replace the ones CPack would
# write with an ldconfig call).
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_LIST_DIR}/conffiles ${CMAKE_CURRENT_LIST_DIR}/postinst
  ${CMAKE_CURRENT_LIST_DIR}/postrm ${CMAKE_CURRENT_LIST_DIR}/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
