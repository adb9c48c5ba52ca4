#!/bin/sh
# An agent in another language, for `agl runner --exec`: its task in AGL_TASK, the model behind
# OPENAI_BASE_URL (agl's gateway), the reward on its last stdout line.
question=$(printf '%s' "$AGL_TASK" | sed 's/.*"question":"\([^"]*\)".*/\1/')
if [ "$question" = "bad" ]; then
  echo "cannot answer $question" >&2
  exit 3
fi
answer=$(curl -sS -X POST "$OPENAI_BASE_URL/chat/completions" -H 'content-type: application/json' \
  -H "authorization: Bearer $OPENAI_API_KEY" \
  -d "{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"$question\"}]}")
echo "answer: $answer"
echo "agl-reward: 0.5"
