{{- define "agentfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.labels" -}}
app.kubernetes.io/name: agentfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agentfleet.selectorLabels" -}}
app.kubernetes.io/name: agentfleet-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "agentfleet.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "agentfleet.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "agentfleet.gatewaySelectorLabels" -}}
app.kubernetes.io/name: agentfleet-gateway
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "agentfleet.gatewayLabels" -}}
{{ include "agentfleet.gatewaySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "agentfleet.gatewayTokensSecret" -}}
{{- default (printf "%s-gateway-tokens" (include "agentfleet.fullname" .)) .Values.gateway.existingSecret -}}
{{- end -}}

{{- define "agentfleet.redisName" -}}
{{- printf "%s-redis" (include "agentfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "agentfleet.redisSelectorLabels" -}}
app.kubernetes.io/name: agentfleet-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The workers' Redis URL is written by the operator beside each worker (the chart's own Redis, whose URL carries its password, and no Secret named for the workers). */}}
{{- define "agentfleet.workerRedisManaged" -}}
{{- if and .Values.redis.deploy (not .Values.worker.redisSecret.name) -}}true{{- end -}}
{{- end -}}

{{/* The Redis settings of the operator and the gateway: AGENTFLEET_REDIS_URL (the chart's Redis, an existing Secret, or the URL inline), the CA's file, WAIT. */}}
{{- define "agentfleet.redisUrlEnv" -}}
- name: AGENTFLEET_REDIS_URL
{{- if .Values.redis.deploy }}
  valueFrom:
    secretKeyRef:
      name: {{ include "agentfleet.redisName" . }}
      key: url
{{- else if .Values.redis.existingSecret }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- else }}
  value: {{ required "redis.url is required when redis.deploy is false and redis.existingSecret is empty" .Values.redis.url | quote }}
{{- end }}
{{- if include "agentfleet.redisCa" . }}
- name: AGENTFLEET_REDIS_CA_FILE
  value: /etc/agentfleet/redis-ca/{{ .Values.redis.tls.caKey }}
{{- end }}
{{- if gt (int .Values.redis.waitReplicas) 0 }}
- name: AGENTFLEET_REDIS_WAIT_REPLICAS
  value: {{ .Values.redis.waitReplicas | quote }}
- name: AGENTFLEET_REDIS_WAIT_TIMEOUT_MS
  value: {{ .Values.redis.waitTimeoutMs | quote }}
{{- end }}
{{- end -}}

{{/* Whether a CA for Redis's TLS is given. */}}
{{- define "agentfleet.redisCa" -}}
{{- if or .Values.redis.tls.caSecret .Values.redis.tls.caConfigMap -}}true{{- end -}}
{{- end -}}

{{/* The mount of Redis's CA (a volumeMounts item), when given. */}}
{{- define "agentfleet.redisCaMount" -}}
{{- if include "agentfleet.redisCa" . }}
- name: redis-ca
  mountPath: /etc/agentfleet/redis-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* The volume of Redis's CA (a volumes item), when given. */}}
{{- define "agentfleet.redisCaVolume" -}}
{{- if .Values.redis.tls.caSecret }}
- name: redis-ca
  secret:
    secretName: {{ .Values.redis.tls.caSecret }}
{{- else if .Values.redis.tls.caConfigMap }}
- name: redis-ca
  configMap:
    name: {{ .Values.redis.tls.caConfigMap }}
{{- end }}
{{- end -}}

{{/* The Secret of the archive's credentials loaded into the operator: yours, the chart's (from archive.credentials), or none. */}}
{{- define "agentfleet.archiveSecret" -}}
{{- if .Values.archive.url -}}
{{- if .Values.archive.existingSecret -}}
{{- .Values.archive.existingSecret -}}
{{- else if .Values.archive.credentials -}}
{{- printf "%s-archive" (include "agentfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the archive's signing key (AGENTFLEET_ARCHIVE_SIGNING_KEY), when checkpoints are signed. */}}
{{- define "agentfleet.archiveSigningSecret" -}}
{{- if and .Values.archive.url .Values.archive.sign -}}
{{- if .Values.archive.signingKeySecret -}}
{{- .Values.archive.signingKeySecret -}}
{{- else -}}
{{- printf "%s-archive-signing" (include "agentfleet.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The operator writes Secrets beside each worker: the chart's Redis URL, the archive's environment. */}}
{{- define "agentfleet.writesWorkerSecrets" -}}
{{- if or (include "agentfleet.workerRedisManaged" .) .Values.archive.url -}}true{{- end -}}
{{- end -}}

{{/*
The operator's rule on Secrets (RBAC cannot grant metadata alone: `get` and `patch` reveal the
value). `get`: an Agent's model key Secret, to check the key is in it (its value is never
logged, written or kept), and the metadata of each `headersFrom` Secret; with the chart's Redis
or an archive, `create` and `patch` of the Secrets beside each worker (the Redis URL, the
archive's environment). Never `list` or `watch`.
*/}}
{{- define "agentfleet.secretRules" -}}
- apiGroups: [""]
  resources: [secrets]
  verbs: {{ if include "agentfleet.writesWorkerSecrets" . }}[get, create, patch]{{ else }}[get]{{ end }}
{{- end -}}
