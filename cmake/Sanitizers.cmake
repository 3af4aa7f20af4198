# ASan + UBSan for the whole build when RANKRUN_SANITIZE is on.
if(RANKRUN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
