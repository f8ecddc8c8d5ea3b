# Writes the synthetic seed-0 model in native and HF naming, f32, native f16/bf16 copies, and the
# synthetic Pocket TTS Mimi (continuous latents; tests/test_pocket.c writes the same file when it
# is absent).
file(MAKE_DIRECTORY ${OUT})
foreach(spec "native;kyutai;f32" "hf;hf;f32" "native_f16;kyutai;f16" "native_bf16;kyutai;bf16"
             "pocket;pocket;f32")
  list(GET spec 0 name)
  list(GET spec 1 naming)
  list(GET spec 2 dtype)
  if(NOT EXISTS ${OUT}/${name}.safetensors)
    execute_process(COMMAND ${MIMI} synth --seed 0 --naming ${naming} --dtype ${dtype}
                            -o ${OUT}/${name}.safetensors RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "mimi synth failed for ${name}")
    endif()
  endif()
endforeach()
