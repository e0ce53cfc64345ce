/* A request's images at submit, in the caller's thread (so decoding and
 * preprocessing never hold up the engine thread): each file decoded,
 * resized and cut into patch rows with the model's processor, the
 * prompt's placeholders expanded and the positions of the expanded prompt
 * computed (model-spec §D.4-D.5, §E.5). */
#ifndef LOOM_ENGINE_REQUEST_IMAGES_H
#define LOOM_ENGINE_REQUEST_IMAGES_H

#include "engine/request.h"
#include "models/model.h"

/* Reads p->images into r (whose prompt is p's copy) and replaces r's
 * prompt with the expanded one, one image decoded at a time within
 * *limits (each decoded image freed once resized).  Bad files, files over
 * the limits, a prompt whose placeholders do not match the images, or a
 * model without a vision tower are LM_ERR_INVALID with a sentence naming
 * the image; images whose rows leave the prompt no room in max_model_len
 * tokens (> 0) are LOOM_ERR_TOO_LONG as soon as they do, the images after
 * them not decoded (so a request holds at most about a context's worth
 * of patch rows). */
lm_status lm_request_attach_images(loom_request *r, const loom_request_params *p,
                                   const lm_vision_info *vision,
                                   const lm_image_processor *processor, int max_patches,
                                   const lm_image_limits *limits, int max_model_len, lm_error *err);

#endif
