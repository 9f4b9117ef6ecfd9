{{/* The chart's names and labels. */}}
{{- define "traintrace.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "traintrace.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "traintrace.labels" -}}
app.kubernetes.io/name: {{ include "traintrace.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* selector labels of one component: (dict "root" $ "component" "worker") */}}
{{- define "traintrace.selector" -}}
app.kubernetes.io/name: {{ include "traintrace.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "traintrace.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* a DNS-1123 name, as streams.kafka.strimzi.k8s_name makes it */}}
{{- define "traintrace.k8sName" -}}
{{- regexReplaceAll "[^a-z0-9.-]" (lower .) "-" | trimAll "-." | trunc 253 -}}
{{- end -}}

{{/* the KafkaUser (Strimzi) of a role */}}
{{- define "traintrace.user" -}}
{{- include "traintrace.k8sName" (get .root.Values.strimzi.users .role | default .role) -}}
{{- end -}}

{{- define "traintrace.bootstrap" -}}
{{- if .Values.kafka.bootstrap -}}
{{- .Values.kafka.bootstrap -}}
{{- else if .Values.strimzi.enabled -}}
{{- printf "%s-kafka-bootstrap:9093" .Values.strimzi.cluster -}}
{{- else -}}
{{- fail "kafka.bootstrap is required (or strimzi.enabled with strimzi.cluster)" -}}
{{- end -}}
{{- end -}}

{{- define "traintrace.caSecret" -}}
{{- if .Values.kafka.caSecret -}}
{{- .Values.kafka.caSecret -}}
{{- else if .Values.strimzi.enabled -}}
{{- printf "%s-cluster-ca-cert" .Values.strimzi.cluster -}}
{{- end -}}
{{- end -}}

{{/*
The Kafka settings of one component, as the environment every traintrace command reads
(KafkaSettings): (dict "root" $ "component" "worker" "role" "processor").
*/}}
{{- define "traintrace.kafkaEnv" -}}
{{- $v := .root.Values -}}
- name: KAFKA_BOOTSTRAP_SERVERS
  value: {{ include "traintrace.bootstrap" .root | quote }}
{{- $protocol := $v.kafka.securityProtocol | default (ternary "SASL_SSL" "" $v.strimzi.enabled) }}
{{- if $protocol }}
- name: KAFKA_SECURITY_PROTOCOL
  value: {{ $protocol | quote }}
{{- end }}
{{- $mechanism := $v.kafka.saslMechanism | default (ternary "SCRAM-SHA-512" "" $v.strimzi.enabled) }}
{{- if $mechanism }}
- name: KAFKA_SASL_MECHANISM
  value: {{ $mechanism | quote }}
{{- end }}
{{- if $v.kafka.existingSecret }}
- name: KAFKA_SASL_USERNAME
  valueFrom: {secretKeyRef: {name: {{ $v.kafka.existingSecret | quote }}, key: {{ printf "%s-username" .component | quote }}}}
- name: KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ $v.kafka.existingSecret | quote }}, key: {{ printf "%s-password" .component | quote }}}}
{{- else if $v.strimzi.enabled }}
{{- $user := include "traintrace.user" (dict "root" .root "role" .role) }}
- name: KAFKA_SASL_USERNAME
  value: {{ $user | quote }}
- name: KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ $user | quote }}, key: password}}
{{- end }}
{{- if include "traintrace.caSecret" .root }}
- name: KAFKA_SSL_CA_LOCATION
  value: /etc/traintrace/kafka-ca/ca.crt
{{- end }}
{{- if $v.kafka.extraConfig }}
- name: TRAINTRACE_KAFKA_CONFIG
  value: /etc/traintrace/kafka/client.properties
{{- end }}
{{- if $v.topicPrefix }}
- name: TRAINTRACE_TOPIC_PREFIX
  value: {{ $v.topicPrefix | quote }}
{{- end }}
{{- end -}}

{{/* the mounts of traintrace.kafkaEnv's files (and /tmp: the root filesystem is read only) */}}
{{- define "traintrace.kafkaMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if include "traintrace.caSecret" . }}
- name: kafka-ca
  mountPath: /etc/traintrace/kafka-ca
  readOnly: true
{{- end }}
{{- if .Values.kafka.extraConfig }}
- name: kafka-config
  mountPath: /etc/traintrace/kafka
  readOnly: true
{{- end }}
{{- end -}}

{{- define "traintrace.kafkaVolumes" -}}
- name: tmp
  emptyDir: {}
{{- with include "traintrace.caSecret" . }}
- name: kafka-ca
  secret: {secretName: {{ . | quote }}, items: [{key: ca.crt, path: ca.crt}]}
{{- end }}
{{- if .Values.kafka.extraConfig }}
- name: kafka-config
  configMap: {name: {{ printf "%s-kafka" (include "traintrace.fullname" .) | quote }}}
{{- end }}
{{- end -}}

{{/* the trusted keyring (the live page): every key in the Secret */}}
{{- define "traintrace.trustedEnv" -}}
{{- if .Values.trustedKeys.existingSecret }}
- name: TRAINTRACE_TRUSTED_KEYS
  value: /etc/traintrace/trusted
{{- end }}
{{- end -}}
